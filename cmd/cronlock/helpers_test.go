//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for concurrent use, for the output of commands and
// processes that tests read while it is written.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// waitLimit bounds every wait of these tests, so that none can hang.
const waitLimit = 20 * time.Second

// eventually polls cond every 20ms until it holds, or fails the test after waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", waitLimit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// writeFile writes content to a file in dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

// processGone reports whether pid has exited (a zombie counts as exited: in a container the
// reaper of orphans may be slow, or absent).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name in parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// readPIDs reads the pids written one per line to path.
func readPIDs(t *testing.T, path string) []int {
	t.Helper()
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var pids []int
	for f := range strings.FieldsSeq(string(data)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	return pids
}

// proc is a cronlock process started by a test.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  syncBuffer // stdout and stderr
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
	case <-time.After(waitLimit):
		t.Fatalf("%s did not exit within %v:\n%s", p.name, waitLimit, p.out.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// waitLog waits until the process's output contains s.
func (p *proc) waitLog(t *testing.T, s string) {
	t.Helper()
	eventually(t, fmt.Sprintf("%s to log %q", p.name, s), func() bool { return strings.Contains(p.out.String(), s) })
}

// runBin runs the binary to completion and returns its exit code and output.
func runBin(t *testing.T, bin string, env []string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
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
