//go:build !unix

package main

import (
	"os/exec"
	"syscall"
)

// Without Unix process groups, a job's command is stopped alone (killed at once): processes
// it started are not reached.

func inNewGroup(*exec.Cmd) {}

func signalGroup(cmd *exec.Cmd, sig syscall.Signal) bool {
	if sig == 0 {
		return false
	}
	return cmd.Process.Kill() == nil
}

func groupAlive(*exec.Cmd) bool { return false }
