package supervise

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// Command runs a job's command, once per call, under a supervisor (see Mode): a
// cronlock process that starts the command in a process group of its own and ends that group
// before the run's lease can end, even if the daemon dies or freezes.
//
// The command gets the run's facts in its environment (CRONLOCK_JOB, CRONLOCK_TICK,
// CRONLOCK_TICK_UNIX_MS, CRONLOCK_FENCING_TOKEN, CRONLOCK_REPLICA, CRONLOCK_ATTEMPT, and
// CRONLOCK_BACKFILL=1 for a backfilled tick); each line
// it writes is logged with the job's name and the stream. The supervisor gets each deadline of
// the run's lease (the lock's validity, moved by each renewal) and sends the process group
// SIGTERM kill_grace before it and SIGKILL at it; when the context ends (lease lost, timeout,
// drain), SIGTERM at once and SIGKILL kill_grace later, or at the deadline if sooner. When the
// command exits, processes it left running in its group are stopped the same way: a run ends
// with its processes, so nothing outlives the lock.
type Command struct {
	Name      string
	Argv      []string
	Env       []string // the daemon's environment, with the job's env:
	Dir       string   // working_dir ("": the daemon's)
	KillGrace time.Duration
	Log       *slog.Logger
	// OutputLevel is the level of the command's output lines; OutputLimit bounds the bytes of
	// output one run logs.
	OutputLevel slog.Level
	OutputLimit int64
	// OutputKeep is how many bytes of the run's output, its last (stdout and stderr as read,
	// whether logged or not), are kept with the run's history record (scheduler.KeepOutput).
	OutputKeep int
}

// groupPoll is how often a stopping process group is checked for processes left, and how
// often the daemon looks for a new deadline of a run's lease to send to its supervisor.
const groupPoll = 20 * time.Millisecond

// outputGrace is how long the output of a command that exited is still read, when a process
// outside its group (e.g. one started with setsid) keeps its stdout or stderr open.
const outputGrace = time.Second

// Run runs the command once, for the run of job.RunFrom(ctx) under its lease
// (lockseam.LeaseFrom(ctx)).
func (c *Command) Run(ctx context.Context) error {
	run, ok := job.RunFrom(ctx)
	if !ok {
		run = &job.Run{Job: c.Name}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: command not started", context.Cause(ctx))
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("command %q did not start: the supervisor (this program) is not found: %w", c.Argv[0], err)
	}
	cmd := exec.Command(exe, append([]string{Mode, strconv.FormatInt(int64(c.KillGrace), 10)}, c.Argv...)...)
	cmd.Env = append(slices.Clone(c.Env),
		"CRONLOCK_JOB="+run.Job,
		"CRONLOCK_TICK="+run.Tick.UTC().Format(time.RFC3339Nano),
		"CRONLOCK_TICK_UNIX_MS="+strconv.FormatInt(run.Tick.UnixMilli(), 10),
		"CRONLOCK_FENCING_TOKEN="+strconv.FormatUint(run.FencingToken, 10),
		"CRONLOCK_REPLICA="+run.Replica,
		"CRONLOCK_ATTEMPT="+strconv.Itoa(run.Attempt),
	)
	if run.Backfill {
		cmd.Env = append(cmd.Env, "CRONLOCK_BACKFILL=1")
	}
	const pipes = 4 // stdout, stderr, control, status; each a read end and a write end
	ends := make([][2]*os.File, 0, pipes)
	defer func() {
		for _, e := range ends {
			e[0].Close() // a second Close only returns an error
			e[1].Close()
		}
	}()
	for range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			return err
		}
		ends = append(ends, [2]*os.File{r, w})
	}
	outR, outW := ends[0][0], ends[0][1]
	errR, errW := ends[1][0], ends[1][1]
	ctlR, ctlW := ends[2][0], ends[2][1]
	stR, stW := ends[3][0], ends[3][1]
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = []*os.File{ctlR, stW} // ctlFD, statusFD
	cmd.Dir = c.Dir                        // the supervisor's, and so the command's
	deadline := leaseDeadline(ctx)
	sendDeadline(ctlW, deadline)
	err = cmd.Start()
	for _, f := range []*os.File{outW, errW, ctlR, stW} { // the supervisor has its own copies
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("command %q did not start: the supervisor did not start: %w", c.Argv[0], err)
	}
	log := c.Log.With("job", c.Name)
	start := time.Now()

	var lastErr string
	var readers sync.WaitGroup
	budget := &outputBudget{limit: c.OutputLimit}
	kept := &tail{keep: c.OutputKeep}
	readers.Go(func() { c.logLines(log, outR, "stdout", nil, budget, kept) })
	readers.Go(func() { c.logLines(log, errR, "stderr", &lastErr, budget, kept) })

	// The feeder tells the supervisor each new deadline, and to stop when ctx ends.
	finished := make(chan struct{})
	var feeder sync.WaitGroup
	feeder.Go(func() {
		poll := time.NewTicker(groupPoll)
		defer poll.Stop()
		for {
			select {
			case <-finished:
				return
			case <-ctx.Done():
				log.Warn("stopping the command: SIGTERM to its process group", "cause", context.Cause(ctx), "kill_grace", c.KillGrace)
				_, _ = io.WriteString(ctlW, "stop\n")
				<-finished
				return
			case <-poll.C:
				if d := leaseDeadline(ctx); !d.Equal(deadline) {
					deadline = d
					sendDeadline(ctlW, d)
				}
			}
		}
	})
	rep := readReport(stR, func(text string) { log.Warn(text) }, func(pid int) {
		log.Info("run started", "tick", run.Tick, "token", run.FencingToken, "attempt", run.Attempt, "pid", pid)
	})
	waitErr := cmd.Wait()
	close(finished)
	feeder.Wait()
	if !rep.exited && rep.pid != 0 {
		endOrphans(log, rep.pid)
	}

	read := make(chan struct{})
	go func() { readers.Wait(); close(read) }()
	t := time.NewTimer(outputGrace)
	select {
	case <-read:
	case <-t.C:
		log.Warn("a process outside the command's process group keeps its output open; no longer reading it")
		outR.Close() // unblocks the readers
		errR.Close()
		<-read
	}
	t.Stop()
	if n := budget.dropped.Load(); n > 0 {
		log.Warn("the command's output past output_limit was not logged", "dropped_bytes", n, "output_limit", c.OutputLimit)
	}
	if out := kept.String(); out != "" {
		scheduler.KeepOutput(ctx, out)
	}

	switch {
	case rep.startErr != "":
		return fmt.Errorf("command %q did not start: %s", c.Argv[0], rep.startErr)
	case !rep.exited:
		return fmt.Errorf("command %q: its supervisor failed (%s)", c.Argv[0], describeExit(cmd.ProcessState, waitErr))
	}
	status := rep.status
	log.Info("run finished", "tick", run.Tick, "token", run.FencingToken, "status", status, "duration", time.Since(start).Round(time.Millisecond))
	if lastErr != "" {
		status += ": " + truncate(lastErr, 300)
	}
	switch {
	case rep.stopped && ctx.Err() != nil:
		return fmt.Errorf("%w: command stopped (%s)", context.Cause(ctx), status)
	case rep.stopped:
		return fmt.Errorf("command stopped at its lease's deadline (%s)", status)
	case rep.code != 0:
		return fmt.Errorf("command %s", status)
	case ctx.Err() != nil:
		// Not stopped: the command exited before SIGKILL, which comes at the deadline the
		// supervisor had, on its own clock: a success, even though the daemon learned it late
		// (frozen, slow).
		log.Warn("the command exited 0 before its lease's deadline, which passed before the daemon heard of it: the run counts as a success",
			"tick", run.Tick, "token", run.FencingToken, "cause", context.Cause(ctx))
	}
	return nil
}

// orphanWait bounds how long the daemon waits, after SIGKILL, for the process group of a run
// whose supervisor died; the run keeps its locks meanwhile.
const orphanWait = 10 * time.Second

// endOrphans ends the process group pgid of a run whose supervisor died before it reported the
// command's end (kill -9 of the supervisor, or of the daemon's process group): SIGKILL, then a
// wait until no process of the group runs, at most orphanWait. The run's handler has not
// returned, so its lease keeps the tick and the run key meanwhile: no other run starts beside
// the orphans.
func endOrphans(log *slog.Logger, pgid int) {
	if !GroupAlive(pgid) {
		return
	}
	log.Warn("the run's supervisor died and left its process group: SIGKILL to the group; the run keeps its locks until the group is gone", "pgid", pgid)
	limit := time.Now().Add(orphanWait)
	poll := time.NewTicker(groupPoll)
	defer poll.Stop()
	for signalGroup(pgid, syscall.SIGKILL) && GroupAlive(pgid) {
		if time.Now().After(limit) {
			log.Error("the run's process group is still there after SIGKILL: releasing the run's locks", "pgid", pgid, "waited", orphanWait)
			return
		}
		<-poll.C
	}
}

// leaseDeadline is when the lease of the run under ctx ends unless renewed (zero: no lease).
func leaseDeadline(ctx context.Context) time.Time {
	if le, ok := lockseam.LeaseFrom(ctx); ok {
		return lockseam.LeaseDeadline(le)
	}
	return time.Time{}
}

// sendDeadline writes the lease deadline d of a run to its supervisor's control pipe w,
// as an instant of monoNow ("none" for the zero time).
func sendDeadline(w io.Writer, d time.Time) {
	if d.IsZero() {
		_, _ = io.WriteString(w, "deadline none\n")
		return
	}
	// monoNow first: a pause between the two readings makes the deadline sent earlier, not later.
	at := monoNow() + int64(time.Until(d))
	_, _ = fmt.Fprintf(w, "deadline %d\n", max(at, 1))
}

// describeExit says how the command ended, e.g. "exited with status 3" or "killed by signal
// terminated".
func describeExit(ps *os.ProcessState, err error) string {
	if ps == nil {
		if err != nil {
			return err.Error()
		}
		return "ended"
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %v", ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", ps.ExitCode())
}

// maxLine is the longest output line logged as one; longer lines are logged in pieces.
const maxLine = 64 << 10

// outputBudget counts a run's output against its limit; it is safe for concurrent use.
type outputBudget struct {
	limit         int64
	used, dropped atomic.Int64
}

// take reports whether n more bytes may be logged, and counts them as dropped if not.
func (b *outputBudget) take(n int) bool {
	if b.used.Add(int64(n)) <= b.limit {
		return true
	}
	b.dropped.Add(int64(n))
	return false
}

// tail keeps the last keep bytes written to it; it is safe for concurrent use.
type tail struct {
	keep int
	mu   sync.Mutex
	buf  []byte // its last keep bytes are kept; cut back when it reaches twice that
}

func (t *tail) add(p []byte) {
	if t.keep <= 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) >= 2*t.keep {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.keep:]...)
	}
}

// String returns the last keep bytes, from the first whole UTF-8 character.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf[max(len(t.buf)-t.keep, 0):]
	for len(b) > 0 && !utf8.RuneStart(b[0]) {
		b = b[1:]
	}
	return string(b)
}

// logLines logs each line read from r at the job's output level, with the stream's name,
// while budget allows, until r ends, and adds every line to kept. It keeps the last non-blank
// line in last, if not nil.
func (c *Command) logLines(log *slog.Logger, r io.Reader, stream string, last *string, budget *outputBudget, kept *tail) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			kept.add(line)
			text := strings.TrimRight(string(line), "\r\n")
			if budget.take(len(line)) {
				log.Log(context.Background(), c.OutputLevel, text, "stream", stream)
			}
			if last != nil && strings.TrimSpace(text) != "" {
				*last = text
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

// truncate shortens s to at most n bytes (at a rune boundary), marking the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
