package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Mode is the hidden command of the supervisor (not in the help):
//
//	cronlock __supervise KILL_GRACE_NS PROGRAM [ARG...]
//
// The supervisor is the parent of a run's command: it starts the command in a process group of
// its own and ends that group when the run's lease could end, whatever happens to the daemon.
// It reads the daemon's orders from fd 3, one line each:
//
//	deadline NS   the lease's deadline, in nanoseconds of monoNow (the first line, always;
//	              "deadline none" when the run has none)
//	stop          stop the command now: the lease was lost, or the timeout or drain passed
//
// and at the end of fd 3 (the daemon died: SIGKILL, OOM) it sends SIGKILL to the group at once.
// The process group gets SIGTERM kill_grace before the deadline (or at "stop") and SIGKILL at
// the deadline, or kill_grace after SIGTERM, whichever comes first: no process of the run is
// left when the lock can expire. It reports to the daemon on fd 4, one line each:
//
//	pid PID       the command started, as process PID (also its process group's id)
//	error TEXT    the command could not start
//	warn TEXT     something the daemon logs at Warn
//	stopped       the command was stopped while it ran: the daemon ordered it, or SIGKILL
//	              reached it (a command that exits 0 after the SIGTERM that comes
//	              kill_grace before the deadline, and before the deadline, is not stopped)
//	exit CODE TEXT  the command's exit code (-1 when killed by a signal) and how it ended
//
// If the supervisor dies before its exit line (kill -9 of it or of the daemon's process group),
// the daemon ends the process group of the pid line itself (endOrphans).
//
// The supervisor ignores SIGINT, SIGTERM and SIGHUP (they reach it with the daemon's process
// group, e.g. from a terminal): only its pipe and the deadline end the run.
const Mode = "__supervise"

// ctlFD and statusFD are the supervisor's pipes from and to the daemon (cmd.ExtraFiles).
const (
	ctlFD    = 3
	statusFD = 4
)

// Supervisor is the supervisor of one run's command, from its command line (Parse).
type Supervisor struct {
	grace time.Duration
	argv  []string
}

// Parse reads the supervisor's command line, args being those after Mode; its errors are
// mistakes in the command line.
func Parse(args []string) (*Supervisor, error) {
	if len(args) < 2 {
		return nil, errors.New(Mode + ": give KILL_GRACE_NS PROGRAM [ARG...]")
	}
	graceNS, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || graceNS < 0 {
		return nil, fmt.Errorf("%s: kill grace %q: not a count of nanoseconds", Mode, args[0])
	}
	return &Supervisor{grace: time.Duration(graceNS), argv: args[1:]}, nil
}

// Run runs the command under supervision, following the daemon's orders on its pipes, until
// the command and its process group are gone.
func (s *Supervisor) Run() error {
	ignored := make(chan os.Signal, 1) // handled, not ignored: exec resets handled signals
	signal.Notify(ignored, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(ignored)

	keepFromChildren(ctlFD)
	keepFromChildren(statusFD)
	ctl := bufio.NewReader(os.NewFile(ctlFD, "control"))
	status := os.NewFile(statusFD, "status")
	defer status.Close()
	report := func(format string, a ...any) { fmt.Fprintf(status, format+"\n", a...) }

	deadline, err := readDeadline(ctl)
	if err != nil {
		report("error %v", err)
		return err
	}
	cmd := exec.Command(s.argv[0], s.argv[1:]...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	inNewGroup(cmd)
	if err := cmd.Start(); err != nil {
		report("error %v", err)
		return err
	}
	report("pid %d", cmd.Process.Pid)

	orders := make(chan string)
	go func() { // ends with the process, or at the pipe's end
		defer close(orders)
		for {
			line, err := ctl.ReadString('\n')
			if err != nil {
				return
			}
			orders <- strings.TrimSpace(line)
		}
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	g := group{cmd: cmd, grace: s.grace, deadline: deadline, report: report}
	waitErr := g.supervise(orders, exited)
	code := -1
	if cmd.ProcessState != nil {
		code = cmd.ProcessState.ExitCode()
	}
	report("exit %d %s", code, describeExit(cmd.ProcessState, waitErr))
	return nil
}

// readDeadline reads the first order, the lease's deadline (0 for none).
func readDeadline(ctl *bufio.Reader) (int64, error) {
	line, err := ctl.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("no deadline from the daemon: %w", err)
	}
	d, ok := parseDeadline(strings.TrimSpace(line))
	if !ok {
		return 0, fmt.Errorf("the first order %q is not a deadline", strings.TrimSpace(line))
	}
	return d, nil
}

// parseDeadline parses a deadline order: "deadline NS" or "deadline none" (0).
func parseDeadline(order string) (int64, bool) {
	v, ok := strings.CutPrefix(order, "deadline ")
	if !ok {
		return 0, false
	}
	if v == "none" {
		return 0, true
	}
	d, err := strconv.ParseInt(v, 10, 64)
	return d, err == nil && d > 0
}

// group is the process group of a supervised command, and when it must end.
type group struct {
	cmd      *exec.Cmd
	grace    time.Duration
	deadline int64 // monoNow ns of the lease's end; 0 for none
	report   func(format string, a ...any)

	termAt  int64 // when SIGTERM was sent; 0 before
	killed  bool
	stopped bool // "stopped" was reported
}

// supervise waits for the command and its group, following the daemon's orders, and returns
// the command's Wait error.
func (g *group) supervise(orders <-chan string, exited <-chan error) error {
	var (
		waitErr error
		done    bool // the command (group leader) exited
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		if !done {
			select { // a command that exited is not "stopped" by a signal that was due meanwhile
			case waitErr = <-exited:
				done, exited = true, nil
			default:
			}
		}
		now := monoNow()
		if done && !GroupAlive(g.cmd.Process.Pid) {
			return waitErr
		}
		if done && g.termAt == 0 {
			g.report("warn the command exited but left processes running in its process group: stopping them")
			g.term(now, false)
		}
		if !g.killed {
			if at := g.termTime(); g.termAt == 0 && at != 0 && now >= at {
				g.report("warn the lease's deadline is kill_grace away and not extended: SIGTERM to the process group")
				g.term(now, !done)
			}
			if at := g.killTime(); at != 0 && now >= at {
				g.report("warn processes left at the lease's deadline or after the kill grace: SIGKILL to the process group")
				g.kill(!done)
			}
		}
		var wake <-chan time.Time // nil: nothing is due
		next := g.next()
		if done && (next == 0 || next-now > int64(groupPoll)) {
			next = now + int64(groupPoll) // the group is polled: its processes are not our children
		}
		if next != 0 {
			timer.Reset(max(time.Duration(next-now), 0))
			wake = timer.C
		}
		select {
		case waitErr = <-exited:
			done, exited = true, nil
		case order, ok := <-orders:
			switch {
			case !ok:
				orders = nil
				if !g.killed {
					g.report("warn the daemon is gone (its pipe closed): SIGKILL to the process group")
					g.kill(!done)
				}
			case order == "stop":
				if !done {
					g.stop()
				}
				if g.termAt == 0 {
					g.term(monoNow(), !done)
				}
			default:
				if d, ok := parseDeadline(order); ok {
					g.deadline = d
				}
			}
		case <-wake:
		}
	}
}

// termTime is when SIGTERM is due without an order: kill_grace before the deadline (0: never).
func (g *group) termTime() int64 {
	if g.deadline == 0 {
		return 0
	}
	return g.deadline - int64(g.grace)
}

// killTime is when SIGKILL is due: at the deadline, or kill_grace after SIGTERM (0: never).
func (g *group) killTime() int64 {
	at := g.deadline
	if g.termAt != 0 && (at == 0 || g.termAt+int64(g.grace) < at) {
		at = g.termAt + int64(g.grace)
	}
	return at
}

// next is the next instant something is due (0: nothing).
func (g *group) next() int64 {
	if g.killed {
		return 0
	}
	if t := g.termTime(); g.termAt == 0 && t != 0 {
		return min(t, g.killTime())
	}
	return g.killTime()
}

// stop reports, once, that the command was stopped while it ran.
func (g *group) stop() {
	if !g.stopped {
		g.stopped = true
		g.report("stopped")
	}
}

// term sends SIGTERM to the group (SIGKILL with no grace); running says the command runs.
func (g *group) term(now int64, running bool) {
	g.termAt = now
	if g.grace == 0 {
		g.kill(running)
		return
	}
	signalGroup(g.cmd.Process.Pid, syscall.SIGTERM)
}

func (g *group) kill(running bool) {
	if running {
		g.stop()
	}
	g.killed = true
	signalGroup(g.cmd.Process.Pid, syscall.SIGKILL)
}

// supervisorReport is what a supervisor said about its run.
type supervisorReport struct {
	pid      int
	startErr string // the command did not start
	stopped  bool   // it was signalled while it ran
	exited   bool   // the exit line came
	code     int
	status   string
}

// readReport reads the supervisor's lines from r until its end, logging the warnings with
// warn and calling started once the command runs.
func readReport(r io.Reader, warn func(string), started func(pid int)) supervisorReport {
	var rep supervisorReport
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		kind, text, _ := strings.Cut(sc.Text(), " ")
		switch kind {
		case "pid":
			rep.pid, _ = strconv.Atoi(text)
			started(rep.pid)
		case "error":
			rep.startErr = text
		case "warn":
			warn(text)
		case "stopped":
			rep.stopped = true
		case "exit":
			code, status, _ := strings.Cut(text, " ")
			rep.code, _ = strconv.Atoi(code)
			rep.status, rep.exited = status, true
		}
	}
	return rep
}
