//go:build unix

package supervise

import (
	"errors"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// inNewGroup makes cmd start in a process group of its own, whose id is its pid, so that
// signalGroup reaches every process it starts (unless one leaves the group, e.g. with setsid).
func inNewGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup sends sig to every process in the process group pgid (the pid of a command
// started with inNewGroup); false when the group is empty.
func signalGroup(pgid int, sig syscall.Signal) bool {
	err := syscall.Kill(-pgid, sig)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// GroupAlive reports whether the process group pgid still has a process that runs. Call it
// only after its leader was waited for, if it is a child. Zombies do not count where
// onlyZombies can tell: an orphan that exited waits for the system's reaper, which in a
// container may be slow or absent.
func GroupAlive(pgid int) bool {
	return signalGroup(pgid, 0) && !onlyZombies(pgid)
}

// monoNow reads CLOCK_MONOTONIC, in nanoseconds: one clock for every process of the host,
// which no one sets, so that the daemon can tell its supervisors an instant (an absolute
// deadline does not go stale if the daemon is paused while it sends it, as a remaining
// duration would).
func monoNow() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("cronlock: CLOCK_MONOTONIC: " + err.Error()) // POSIX requires it
	}
	return ts.Nano()
}

// keepFromChildren marks the inherited file descriptor fd close-on-exec, so that the
// processes the supervisor starts do not hold its pipes.
func keepFromChildren(fd int) { syscall.CloseOnExec(fd) }
