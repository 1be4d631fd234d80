//go:build !unix

package main

import (
	"os/exec"
	"syscall"
	"time"
)

// Without Unix process groups, a job's command is stopped alone (killed at once): processes
// it started are not reached. The supervisor's deadline is on the wall clock (monoNow), which a
// clock step moves.

func inNewGroup(*exec.Cmd) {}

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) bool {
	if sig == 0 {
		return false
	}
	return cmd.Process.Kill() == nil
}

func groupAlive(*exec.Cmd) bool { return false }

func monoNow() int64 { return time.Now().UnixNano() }

func keepFromChildren(int) {}
