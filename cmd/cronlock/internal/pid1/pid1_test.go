//go:build linux

package pid1

import (
	"bufio"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// childEnv selects what the test binary does when Run starts it as the program.
const childEnv = "PID1_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "orphan":
		os.Exit(leaveOrphan())
	case "wait":
		os.Stdout.WriteString("ready\n")
		time.Sleep(time.Hour) // until a signal ends it
		os.Exit(0)
	case "exit":
		os.Exit(3)
	}
	os.Exit(m.Run())
}

// leaveOrphan starts a shell that starts a process in the background and exits without waiting
// for it, like a job's command that leaves a process behind; it prints the orphan's pid and
// returns once the orphan has exited (a zombie of Run's process, or already reaped by it).
func leaveOrphan() int {
	out, err := exec.Command("/bin/sh", "-c", "true & echo $!").Output()
	if err != nil {
		return 10
	}
	pid := strings.TrimSpace(string(out))
	os.Stdout.WriteString(pid + "\n")
	for state(pid) != "Z" && state(pid) != "" {
		time.Sleep(time.Millisecond)
	}
	return 0
}

// state is the process state of pid from /proc ("Z" for a zombie), "" when there is no such
// process.
func state(pid string) string {
	stat, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return ""
	}
	s := string(stat)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return f[0]
}

// runChild runs the test binary under Run in mode, with its stdout a pipe read by lines.
func runChild(t *testing.T, mode string) (lines *bufio.Scanner, done <-chan int) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	codes := make(chan int, 1)
	go func() {
		defer w.Close()
		code, err := Run(exe, []string{exe}, &os.ProcAttr{
			Env:   append(os.Environ(), childEnv+"="+mode, "GORACE=atexit_sleep_ms=0"),
			Files: []*os.File{os.Stdin, w, os.Stderr},
		})
		if err != nil {
			t.Error(err)
		}
		codes <- code
	}()
	return bufio.NewScanner(r), codes
}

// A process that a command leaves behind, and that exits, does not stay a zombie: Run waits for
// it too.
func TestReapsOrphans(t *testing.T) {
	lines, done := runChild(t, "orphan")
	if !lines.Scan() {
		t.Fatalf("the child printed no pid: %v", lines.Err())
	}
	orphan := lines.Text()
	if _, err := strconv.Atoi(orphan); err != nil {
		t.Fatalf("the child printed %q, not a pid", orphan)
	}
	if code := <-done; code != 0 {
		t.Fatalf("the child exited %d", code)
	}
	if s := state(orphan); s != "" {
		t.Fatalf("the orphan %s is still there in state %s: not reaped", orphan, s)
	}
}

// Signals reach the program; the exit code says which one ended it.
func TestForwardsSignals(t *testing.T) {
	lines, done := runChild(t, "wait")
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("the child did not start: %v", lines.Err())
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := <-done; code != 128+int(syscall.SIGTERM) {
		t.Fatalf("exit code %d, want %d (SIGTERM)", code, 128+int(syscall.SIGTERM))
	}
}

func TestExitCode(t *testing.T) {
	_, done := runChild(t, "exit")
	if code := <-done; code != 3 {
		t.Fatalf("exit code %d, want 3", code)
	}
}

func TestStartError(t *testing.T) {
	_, err := Run("/nonexistent/cronlock", []string{"cronlock"}, &os.ProcAttr{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want one that says the program does not exist", err)
	}
}
