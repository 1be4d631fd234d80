//go:build unix

package supervise

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// newCommand returns a command job whose log goes to the returned buffer.
func newCommand(argv ...string) (*Command, *proctest.SyncBuffer) {
	var logs proctest.SyncBuffer
	return &Command{
		Name:        "test-job",
		Argv:        argv,
		Env:         os.Environ(),
		KillGrace:   10 * time.Second,
		Log:         slog.New(slog.NewTextHandler(&logs, nil)),
		OutputLimit: 1 << 20,
	}, &logs
}

// runCtx returns a context that carries a run of tick with token.
func runCtx(tick time.Time, token uint64) context.Context {
	return job.NewContext(context.Background(), &job.Run{Job: "test-job", Tick: tick, Attempt: 2, FencingToken: token, Replica: "r7"})
}

func TestCommandEnvironmentAndOutput(t *testing.T) {
	c, logs := newCommand("sh", "-c", `echo "$CRONLOCK_JOB|$CRONLOCK_TICK|$CRONLOCK_TICK_UNIX_MS|$CRONLOCK_FENCING_TOKEN|$CRONLOCK_REPLICA|$CRONLOCK_ATTEMPT"; echo "to stderr" >&2; printf 'no newline'`)
	tick := time.Date(2030, 1, 2, 3, 4, 5, 500_000_000, time.FixedZone("X", 3600))
	require.NoError(t, c.Run(runCtx(tick, 42)))
	out := logs.String()
	assert.Contains(t, out, `msg=test-job|2030-01-02T02:04:05.5Z|1893549845500|42|r7|2 job=test-job stream=stdout`)
	assert.Contains(t, out, `msg="to stderr" job=test-job stream=stderr`)
	assert.Contains(t, out, `msg="no newline" job=test-job stream=stdout`)
	assert.Contains(t, out, `msg="run finished" job=test-job`)
	assert.Contains(t, out, `status="exited with status 0"`)
}

func TestCommandFailure(t *testing.T) {
	c, _ := newCommand("sh", "-c", `echo "first" >&2; echo "the last words" >&2; echo "   " >&2; exit 3`)
	err := c.Run(runCtx(time.Now(), 1))
	require.Error(t, err)
	assert.Equal(t, "command exited with status 3: the last words", err.Error())
	assert.Equal(t, outcome.Failed, middleware.Outcome(err))
}

func TestCommandNotFound(t *testing.T) {
	c, _ := newCommand("/nonexistent/cronlock-test-program")
	err := c.Run(runCtx(time.Now(), 1))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `command "/nonexistent/cronlock-test-program" did not start`)
}

// A command that outlives its timeout gets SIGTERM, with every process of its group: the
// shell's child too.
func TestCommandTimeoutStopsProcessGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	c, logs := newCommand("sh", "-c", `sleep 30 & echo $! > "$0"; echo $$ >> "$0"; wait`, pidFile)
	// The timeout comes once both processes are up (as middleware.Timeout cancels the run's
	// context, with cause ErrTimeout): what is stopped is then the whole group, however long
	// the shell took to start.
	ctx, cancel := context.WithCancelCause(runCtx(time.Now(), 1))
	go func() {
		proctest.Eventually(t, "the pid file", func() bool { b, _ := os.ReadFile(pidFile); return strings.Count(string(b), "\n") == 2 })
		cancel(middleware.ErrTimeout)
	}()
	err := c.Run(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, middleware.ErrTimeout)
	assert.Contains(t, err.Error(), "command stopped (killed by signal terminated)")
	pids := proctest.ReadPIDs(t, pidFile)
	require.Len(t, pids, 2)
	for _, pid := range pids {
		proctest.Eventually(t, "the command's processes to exit", func() bool { return proctest.ProcessGone(pid) })
	}
	assert.Contains(t, logs.String(), "stopping the command: SIGTERM to its process group")
	assert.NotContains(t, logs.String(), "SIGKILL")
}

// Processes that ignore SIGTERM get SIGKILL after the kill grace.
func TestCommandKillAfterGrace(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	c, logs := newCommand("sh", "-c", `trap "" TERM; sleep 30 & echo $! > "$0"; echo $$ >> "$0"; wait`, pidFile)
	c.KillGrace = 200 * time.Millisecond
	ctx, cancel := context.WithCancelCause(runCtx(time.Now(), 1))
	go func() {
		proctest.Eventually(t, "the pid file", func() bool { b, _ := os.ReadFile(pidFile); return strings.Count(string(b), "\n") == 2 })
		cancel(redlock.ErrLeaseLost)
	}()
	err := c.Run(ctx)
	require.Error(t, err)
	assert.ErrorIs(t, err, redlock.ErrLeaseLost)
	assert.Equal(t, outcome.LeaseLost, middleware.Outcome(err))
	assert.Contains(t, err.Error(), "killed by signal killed")
	for _, pid := range proctest.ReadPIDs(t, pidFile) {
		proctest.Eventually(t, "the command's processes to exit", func() bool { return proctest.ProcessGone(pid) })
	}
	assert.Contains(t, logs.String(), "processes left at the lease's deadline or after the kill grace: SIGKILL to the process group")
}

// Processes a command leaves behind in its group when it exits are stopped: nothing outlives
// the run (and its lock).
func TestCommandLeftoversStopped(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "pids")
	c, logs := newCommand("sh", "-c", `sleep 30 > /dev/null 2>&1 & echo $! > "$0"`, pidFile)
	require.NoError(t, c.Run(runCtx(time.Now(), 1)))
	pids := proctest.ReadPIDs(t, pidFile)
	require.Len(t, pids, 1)
	proctest.Eventually(t, "the left-over process to exit", func() bool { return proctest.ProcessGone(pids[0]) })
	assert.Contains(t, logs.String(), "the command exited but left processes running in its process group: stopping them")
}

// A process that left the group but keeps the output open does not hold the run forever.
func TestCommandOutputHeldOpen(t *testing.T) {
	if _, err := os.Stat("/usr/bin/setsid"); err != nil {
		t.Skip("setsid not installed")
	}
	pidFile := filepath.Join(t.TempDir(), "pids")
	// The parent exits once the child runs in a session of its own, out of the group.
	c, logs := newCommand("sh", "-c", `setsid sh -c 'echo $$ > "$0"; exec sleep 30' "$0" & while [ ! -s "$0" ]; do sleep 0.01; done`, pidFile)
	start := time.Now()
	require.NoError(t, c.Run(runCtx(time.Now(), 1)))
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, logs.String(), "keeps its output open")
	for _, pid := range proctest.ReadPIDs(t, pidFile) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestTruncate(t *testing.T) {
	assert.Equal(t, "abc", truncate("abc", 3))
	assert.Equal(t, "ab…", truncate("abcd", 2))
	assert.Equal(t, "é…", truncate("éé", 3), "cuts at a rune boundary")
}

func TestDescribeExitWithoutState(t *testing.T) {
	assert.Equal(t, "boom", describeExit(nil, errors.New("boom")))
}

// A command that gets the SIGTERM that comes kill_grace before its lease's deadline, and exits
// 0 before the deadline, ended inside its lease: its run succeeded.
func TestCommandExitZeroAfterTheGraceSIGTERM(t *testing.T) {
	node := redistest.Start(t, redistest.Config{})
	locks, err := redlock.New([]redlock.Node{node.Client()}, redlock.WithoutQuarantine())
	require.NoError(t, err)
	defer locks.Close()
	l, err := locks.Acquire(context.Background(), redistest.Key(t), 3*time.Second)
	require.NoError(t, err)
	lease, err := l.Lease(context.Background())
	require.NoError(t, err)
	defer func() { _ = lease.Close(context.Background()) }()
	require.NoError(t, node.Stop()) // no renewal moves the deadline any more
	c, logs := newCommand("sh", "-c", `trap 'exit 0' TERM; while :; do sleep 0.05; done`)
	c.KillGrace = 2 * time.Second // SIGTERM 2 s before the deadline, SIGKILL at it
	require.NoError(t, c.Run(job.NewContext(lease.Context(), &job.Run{Job: "test-job", Tick: time.Now()})))
	assert.Contains(t, logs.String(), "the lease's deadline is kill_grace away and not extended: SIGTERM to the process group")
}

// tail keeps the last bytes written to it, from a whole UTF-8 character, however they came in.
func TestTail(t *testing.T) {
	kept := &tail{keep: 8}
	for _, p := range []string{"first line\n", "é", "é", "é\n", "0123"} { // é is two bytes
		kept.add([]byte(p))
	}
	assert.Equal(t, "é\n0123", kept.String(), "the last 8 bytes, less the cut character they begin in")
	for range 100 {
		kept.add([]byte("ab\n"))
	}
	assert.Equal(t, "b\nab\nab\n", kept.String())
	assert.Less(t, len(kept.buf), 2*8, "cut back as it reaches twice keep")

	none := &tail{}
	none.add([]byte("x"))
	assert.Empty(t, none.String(), "keep 0: nothing")
}
