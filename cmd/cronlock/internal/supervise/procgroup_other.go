//go:build !unix

package supervise

import (
	"os"
	"os/exec"
	"syscall"
	"time"
)

// Without Unix process groups, a job's command is stopped alone (killed at once): processes
// it started are not reached. The supervisor's deadline is on the wall clock (monoNow), which a
// clock step moves.

func inNewGroup(*exec.Cmd) {}

func signalGroup(pid int, sig syscall.Signal) bool {
	if sig == 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	return err == nil && p.Kill() == nil
}

func GroupAlive(int) bool { return false }

func monoNow() int64 { return time.Now().UnixNano() }

func keepFromChildren(int) {}
