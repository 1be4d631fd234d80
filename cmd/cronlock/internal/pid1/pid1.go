//go:build linux

// Package pid1 lets cronlock be a container's first process (PID 1) without an init in front
// (tini, dumb-init, docker run --init).
//
// The first process of a PID namespace has two duties that other processes do not. The kernel
// gives it every orphan: a process whose parent exited (e.g. one a job's command started in the
// background and left behind) becomes its child, and when that process exits it stays a zombie
// until its new parent waits for it. And it gets no signal it has no handler for: SIGTERM from
// `docker stop` or the kubelet would be dropped by a program that only uses the default action.
//
// Run meets both by staying out of the way: it starts the real program as its only child, passes
// it every signal, and waits for every process that ends up as its child. Since the program runs
// in a process of its own, it keeps waiting for its own children (the job supervisors, through
// os/exec) without a second waiter ever taking one of their exit statuses; Run is the only one
// that waits on the orphans. When the program exits, Run returns its exit status; the kernel then
// ends what is left in the namespace.
//
// Run also works in a process that is not PID 1: it makes itself the child subreaper
// (PR_SET_CHILD_SUBREAPER), so that orphans of its descendants come to it instead of to the
// system's init; the tests use that.
package pid1

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Run starts the program exe with args (args[0] is its name) and attr as its child, forwards to
// it every signal Run receives, reaps every child that exits, and returns once the program has
// exited: its exit code, or 128 + the signal's number when a signal ended it (a shell's
// convention). The error is that of starting the program.
func Run(exe string, args []string, attr *os.ProcAttr) (int, error) {
	signals := make(chan os.Signal, 64)
	signal.Notify(signals) // every signal, SIGCHLD included, before the child can exit
	defer signal.Stop(signals)
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return 1, fmt.Errorf("pid1: becoming the subreaper: %w", err)
	}
	child, err := os.StartProcess(exe, args, attr)
	if err != nil {
		return 1, fmt.Errorf("pid1: %w", err)
	}
	for {
		switch sig := <-signals; sig {
		case syscall.SIGCHLD:
			if code, exited := reap(child.Pid); exited {
				return code, nil
			}
		case syscall.SIGURG: // the Go runtime preempts goroutines with it: not meant for anyone
		default:
			_ = child.Signal(sig) // fails only once the child has exited: SIGCHLD follows
		}
	}
}

// reap waits for every child that has exited (SIGCHLDs coalesce: one may stand for many) and
// reports whether the program pid was one of them, with its exit code.
func reap(pid int) (code int, exited bool) {
	for {
		var ws unix.WaitStatus
		p, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if p <= 0 || err != nil { // none left that has exited (0), or no children at all (ECHILD)
			return code, exited
		}
		if p == pid {
			code, exited = exitCode(ws), true
		}
	}
}

func exitCode(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}
