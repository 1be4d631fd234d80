//go:build !linux

package main

import "syscall"

// sysProcAttr puts a replica in a process group of its own, so that a Ctrl-C reaches the
// parent alone (which stops the replicas). Pdeathsig exists only on Linux.
func sysProcAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// lockThreadForChild is a no-op without Pdeathsig.
func lockThreadForChild() {}
