//go:build unix

package main

import (
	"errors"
	"os/exec"
	"syscall"
)

// inNewGroup makes cmd start in a process group of its own, whose id is its pid, so that
// signalGroup reaches every process it starts (unless one leaves the group, e.g. with setsid).
func inNewGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to every process in the process group of cmd (started with
// inNewGroup); false when the group is empty.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) bool {
	err := syscall.Kill(-cmd.Process.Pid, sig)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// groupAlive reports whether the process group of cmd still has a process that runs. Call it
// only after cmd was waited for. Zombies do not count where onlyZombies can tell: an orphan
// that exited waits for the system's reaper, which in a container may be slow or absent.
func groupAlive(cmd *exec.Cmd) bool {
	return signalGroup(cmd, 0) && !onlyZombies(cmd.Process.Pid)
}
