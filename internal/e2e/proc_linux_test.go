package e2e

import (
	"runtime"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL the child when the thread that started it exits;
// startProcess keeps that thread for as long as the child lives, so a test binary that dies
// leaves no Jaeger behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

func lockThreadForChild() { runtime.LockOSThread() }
