//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
)

// writeFile writes content to a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// proc is a cronlock process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  proctest.SyncBuffer // stdout and stderr
	done chan struct{}
	err  error
}

func startProc(t *testing.T, bin, name string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a group of its own, which a test may kill
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("output of %s:\n%s", p.name, p.out.String())
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(sig))
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(proctest.WaitLimit):
		t.Fatalf("%s did not exit within %v:\n%s", p.name, proctest.WaitLimit, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitLog waits until the process's output contains s.
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	proctest.Eventually(t, fmt.Sprintf("%s to log %q", p.name, s), func() bool { return strings.Contains(p.out.String(), s) })
}

// servingAddr finds the address in the daemon's "http: serving" log line.
var servingAddr = regexp.MustCompile(`msg="http: serving [^"]*" addr=(\S+)`)

// httpAddr waits for the daemon's HTTP server and returns the host:port it listens on.
func (p *proc) httpAddr(t *testing.T) string {
	t.Helper()
	p.waitLog(t, "http: serving")
	return servingAddr.FindStringSubmatch(p.out.String())[1]
}

// runBin runs the binary to completion and returns its exit code and output.
func runBin(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), proctest.WaitLimit)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("cronlock %q: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

// buildBinary builds cronlock into dir.
func buildBinary(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "cronlock")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}
