package main

import (
	"fmt"
	"os"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/pid1"
)

// runAsPID1 runs the command line in a child process when this one is the first process of its
// PID namespace (a container's entrypoint), and stays in front of it to reap orphans and pass
// signals on (package pid1). It reports false, without doing anything, in any other process.
func runAsPID1() (code int, ran bool) {
	if os.Getpid() != 1 {
		return 0, false
	}
	exe, err := os.Executable()
	if err == nil {
		code, err = pid1.Run(exe, os.Args, &os.ProcAttr{Files: []*os.File{os.Stdin, os.Stdout, os.Stderr}})
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "cronlock: as PID 1: %v\n", err)
		return 1, true
	}
	return code, true
}
