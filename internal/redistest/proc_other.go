//go:build !linux

package redistest

import (
	"syscall"
	"time"
)

// sysProcAttr returns nil: Pdeathsig exists only on Linux, so elsewhere a
// killed test binary can leave redis-server processes behind.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// lockThreadForChild is a no-op without Pdeathsig.
func lockThreadForChild() {}

// waitStopped cannot observe the stopped state portably; SIGSTOP is
// delivered asynchronously, so give it a moment.
func waitStopped(pid int, exited <-chan struct{}, d time.Duration) error {
	time.Sleep(10 * time.Millisecond)
	return nil
}
