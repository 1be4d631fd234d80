package main

import (
	"runtime"
	"syscall"
)

// sysProcAttr puts a replica in a process group of its own, so that a Ctrl-C reaches the
// parent alone (which stops the replicas), and makes the kernel SIGKILL it when the thread
// that started it exits (see lockThreadForChild).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// lockThreadForChild pins the calling goroutine to its OS thread for good: Pdeathsig is
// delivered when the thread that forked the child exits, and the goroutine that starts a
// replica stays on that thread, in cmd.Wait, until the replica is reaped.
func lockThreadForChild() { runtime.LockOSThread() }
