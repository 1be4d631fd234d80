package main

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
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/cronlock/cronlock/job"
)

// commandJob runs a job's command, once per call, in a process group of its own.
//
// The command gets the run's facts in its environment (CRONLOCK_JOB, CRONLOCK_TICK,
// CRONLOCK_TICK_UNIX_MS, CRONLOCK_FENCING_TOKEN, CRONLOCK_REPLICA, CRONLOCK_ATTEMPT); each line
// it writes is logged with the job's name and the stream. When the run's context ends (lease
// lost, timeout, drain deadline) its process group gets SIGTERM, then SIGKILL after the kill
// grace. When the command exits, processes it left running in its group are stopped the same
// way: a run ends with its processes, so nothing outlives the lock.
type commandJob struct {
	name      string
	argv      []string
	env       []string // the daemon's environment
	killGrace time.Duration
	log       *slog.Logger
}

// groupPoll is how often a stopping process group is checked for processes left.
const groupPoll = 20 * time.Millisecond

// outputGrace is how long the output of a command that exited is still read, when a process
// outside its group (e.g. one started with setsid) keeps its stdout or stderr open.
const outputGrace = time.Second

func (c *commandJob) run(ctx context.Context) error {
	run, ok := job.RunFrom(ctx)
	if !ok {
		run = &job.Run{Job: c.name}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("%w: command not started", context.Cause(ctx))
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = append(slices.Clone(c.env),
		"CRONLOCK_JOB="+run.Job,
		"CRONLOCK_TICK="+run.Tick.UTC().Format(time.RFC3339Nano),
		"CRONLOCK_TICK_UNIX_MS="+strconv.FormatInt(run.Tick.UnixMilli(), 10),
		"CRONLOCK_FENCING_TOKEN="+strconv.FormatUint(run.FencingToken, 10),
		"CRONLOCK_REPLICA="+run.Replica,
		"CRONLOCK_ATTEMPT="+strconv.Itoa(run.Attempt),
	)
	inNewGroup(cmd)
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return err
	}
	defer errR.Close()
	cmd.Stdout, cmd.Stderr = outW, errW
	err = cmd.Start()
	outW.Close() // the child has its own copies
	errW.Close()
	if err != nil {
		return fmt.Errorf("command %q did not start: %w", c.argv[0], err)
	}
	log := c.log.With("job", c.name)
	log.Info("run started", "tick", run.Tick, "token", run.FencingToken, "attempt", run.Attempt, "pid", cmd.Process.Pid)
	start := time.Now()

	var lastErr string
	var readers sync.WaitGroup
	readers.Go(func() { c.logLines(log, outR, "stdout", nil) })
	readers.Go(func() { c.logLines(log, errR, "stderr", &lastErr) })

	stopped, waitErr := c.wait(ctx, cmd, log)

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

	status := describeExit(cmd.ProcessState, waitErr)
	log.Info("run finished", "tick", run.Tick, "token", run.FencingToken, "status", status, "duration", time.Since(start).Round(time.Millisecond))
	if lastErr != "" {
		status += ": " + truncate(lastErr, 300)
	}
	if stopped {
		return fmt.Errorf("%w: command stopped (%s)", context.Cause(ctx), status)
	}
	if waitErr != nil {
		return fmt.Errorf("command %s", status)
	}
	return nil
}

// wait waits for the command to exit. If ctx ends first, it stops the command's process group
// and reports stopped. Once the command exited, it stops the processes left in its group.
func (c *commandJob) wait(ctx context.Context, cmd *exec.Cmd, log *slog.Logger) (stopped bool, err error) {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err = <-exited:
		if groupAlive(cmd) {
			log.Warn("the command exited but left processes running in its process group: stopping them",
				"pgid", cmd.Process.Pid)
			c.stopGroup(cmd, nil, log)
		}
		return false, err
	case <-ctx.Done():
		log.Warn("stopping the command: SIGTERM to its process group", "pgid", cmd.Process.Pid,
			"cause", context.Cause(ctx), "kill_grace", c.killGrace)
		return true, c.stopGroup(cmd, exited, log)
	}
}

// stopGroup sends SIGTERM to the command's process group, and SIGKILL when processes are left
// after the kill grace. exited, when not nil, delivers the leader's exit; stopGroup returns
// it. It returns once the leader exited and the group is empty, or SIGKILL was sent.
func (c *commandJob) stopGroup(cmd *exec.Cmd, exited <-chan error, log *slog.Logger) error {
	var err error
	if !signalGroup(cmd, syscall.SIGTERM) && exited == nil {
		return nil
	}
	grace := time.NewTimer(c.killGrace)
	defer grace.Stop()
	poll := time.NewTicker(groupPoll)
	defer poll.Stop()
	for {
		if exited == nil && !groupAlive(cmd) {
			return err
		}
		select {
		case err = <-exited:
			exited = nil
		case <-poll.C:
		case <-grace.C:
			log.Warn("processes left after the kill grace: SIGKILL to the process group", "pgid", cmd.Process.Pid)
			signalGroup(cmd, syscall.SIGKILL)
			if exited != nil {
				err = <-exited
			}
			return err
		}
	}
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

// logLines logs each line read from r, with the stream's name, until r ends. It keeps the last
// non-blank line in last, if not nil.
func (c *commandJob) logLines(log *slog.Logger, r io.Reader, stream string, last *string) {
	br := bufio.NewReaderSize(r, maxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			text := strings.TrimRight(string(line), "\r\n")
			log.Info(text, "stream", stream)
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
