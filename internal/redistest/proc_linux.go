package redistest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"time"
)

// sysProcAttr makes the kernel SIGKILL redis-server when the thread that
// started it exits (see lockThreadForChild).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// lockThreadForChild pins the calling goroutine to its OS thread for good.
// Pdeathsig is delivered when the *thread* that forked the child exits; the
// goroutine that starts redis-server stays on that thread, blocked in
// cmd.Wait, until the child has been reaped, so the signal fires only if
// the whole test binary dies. Not unlocking makes the runtime discard the
// thread when the goroutine returns instead of reusing it.
func lockThreadForChild() { runtime.LockOSThread() }

// waitStopped waits until every thread of pid is in the stopped state
// ('T' in /proc/PID/task/TID/stat), or the process exits, or d elapses.
func waitStopped(pid int, exited <-chan struct{}, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		stopped, err := allThreadsStopped(pid)
		if err == nil && stopped {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("process exited while being paused")
		default:
		}
		if time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("not stopped after %v: %w", d, err)
			}
			return fmt.Errorf("not stopped after %v", d)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func allThreadsStopped(pid int) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("reading /proc/%d/task: no threads found", pid)
	}
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		// Format: "pid (comm) S ...", comm may contain spaces or ')'.
		i := bytes.LastIndexByte(data, ')')
		if i < 0 || i+2 >= len(data) {
			return false, fmt.Errorf("unexpected format of %s", path)
		}
		if st := data[i+2]; st != 'T' && st != 't' {
			return false, nil
		}
	}
	return true, nil
}
