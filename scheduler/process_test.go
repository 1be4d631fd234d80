package scheduler_test

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/middleware"
)

// buildWorker builds internal/testworker into a temporary directory.
func buildWorker(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "testworker")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/cronlock/cronlock/internal/testworker").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// worker is a testworker process.
type worker struct {
	name   string
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan error
}

func startWorker(t *testing.T, bin, name string, args ...string) *worker {
	t.Helper()
	w := &worker{name: name, done: make(chan error, 1)}
	w.cmd = exec.Command(bin, append([]string{"-replica", name}, args...)...)
	w.cmd.Stderr = &w.stderr
	require.NoError(t, w.cmd.Start())
	go func() { w.done <- w.cmd.Wait() }()
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = w.cmd.Process.Signal(syscall.SIGCONT)
			_ = w.cmd.Process.Kill()
			<-w.done
		}
	})
	return w
}

// wait waits for the worker to exit and requires a clean exit.
func (w *worker) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-w.done:
		w.done <- err // for Cleanup
		require.NoError(t, err, "worker %s: %s", w.name, w.stderr.String())
	case <-time.After(waitLimit):
		t.Fatalf("worker %s did not exit: %s", w.name, w.stderr.String())
	}
}

// stop ends the worker, stopped or not (SIGTERM, then SIGKILL after waitLimit), and returns
// its stderr once it exited: for a failing test's log.
func (w *worker) stop() string {
	_ = w.cmd.Process.Signal(syscall.SIGCONT)
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	var err error
	select {
	case err = <-w.done:
	case <-time.After(waitLimit):
		_ = w.cmd.Process.Kill()
		err = <-w.done
	}
	w.done <- err // for Cleanup
	return w.stderr.String()
}

func (w *worker) signal(t *testing.T, sig syscall.Signal) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(sig))
}

// record is one line of a testworker's ledger.
type record struct {
	Job, Replica string
	Tick         time.Time
	Token        uint64
	Start, End   time.Time
	Cancelled    bool
	Deadline     time.Time
	Cause        string
	startedOnly  bool
}

func parseRecord(t *testing.T, line string) record {
	t.Helper()
	f := strings.Split(line, "|")
	require.GreaterOrEqual(t, len(f), 5, "ledger line %q", line)
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		require.NoError(t, err, "ledger line %q", line)
		return n
	}
	token, err := strconv.ParseUint(f[3], 10, 64)
	require.NoError(t, err)
	r := record{Job: f[0], Tick: time.UnixMilli(num(f[1])), Replica: f[2], Token: token, Start: time.Unix(0, num(f[4]))}
	if len(f) == 5 {
		r.startedOnly = true
		return r
	}
	require.GreaterOrEqual(t, len(f), 9, "ledger line %q", line)
	r.End, r.Cancelled, r.Deadline, r.Cause = time.Unix(0, num(f[5])), f[6] == "1", time.Unix(0, num(f[7])), f[8]
	return r
}

func readLedger(t *testing.T, rc *redis.Client, key string) []record {
	t.Helper()
	lines, err := rc.LRange(context.Background(), key, 0, -1).Result()
	require.NoError(t, err)
	var out []record
	for _, l := range lines {
		out = append(out, parseRecord(t, l))
	}
	return out
}

// waitLedger polls the ledger until a record matches pred.
func waitLedger(t *testing.T, rc *redis.Client, key, what string, pred func(record) bool) record {
	t.Helper()
	var found record
	require.Eventually(t, func() bool {
		for _, r := range readLedger(t, rc, key) {
			if pred(r) {
				found = r
				return true
			}
		}
		return false
	}, waitLimit, 5*time.Millisecond, "waiting for %s", what)
	return found
}

// processCluster starts 3 lock nodes (quarantine ended) and a ledger node.
func processCluster(t *testing.T) (*cluster, *redistest.Server, string) {
	t.Helper()
	c := newCluster(t, 3, false)
	c.client(t, false) // ends the nodes' quarantine
	ledger := redistest.Start(t, redistest.Config{})
	var addrs []string
	for _, s := range c.Servers {
		addrs = append(addrs, s.Addr())
	}
	return c, ledger, strings.Join(addrs, ",")
}

// Three worker processes with clocks at +400ms, 0 and −400ms run a 5ms job every 200ms on
// three nodes: every tick runs exactly once.
func TestExactlyOnceAcrossProcesses(t *testing.T) {
	bin := buildWorker(t)
	_, ledger, nodes := processCluster(t)
	const startup = 1500 * time.Millisecond // process start and margin
	from := time.Now().Add(startup)
	to := from.Add(skewTicks * skewPeriod)
	duration := time.Until(to.Add(startup))
	var workers []*worker
	for i, off := range []time.Duration{400 * time.Millisecond, 0, -400 * time.Millisecond} {
		workers = append(workers, startWorker(t, bin, fmt.Sprintf("p%d", i),
			"-nodes", nodes, "-ledger", ledger.Addr(), "-job", "fast", "-spec", fmt.Sprintf("@every %v", skewPeriod),
			"-offset", off.String(), "-work", "5ms", "-ttl", "2s", "-node-timeout", "100ms", "-duration", duration.String(), "-v"))
	}
	for _, w := range workers {
		w.wait(t)
	}
	var runs []tickRun
	perReplica := map[string]int{}
	for _, r := range readLedger(t, ledger.Client(), "ledger") {
		require.False(t, r.Cancelled, "run %+v", r)
		runs = append(runs, tickRun{Tick: r.Tick, Token: r.Token, Start: r.Start})
		perReplica[r.Replica]++
	}
	checkExactlyOnce(t, runs, nil, from, to, skewPeriod)
	t.Logf("runs per replica: %v", perReplica)
	if t.Failed() {
		for _, w := range workers {
			t.Logf("worker %s:\n%s", w.name, w.stderr.String())
		}
	}
}

// A worker frozen with SIGSTOP past its lock's TTL loses its lease: when it resumes, its job's
// context is cancelled with ErrLeaseLost, and its lease had ended before another worker took
// the tick, with a larger fencing token. (The frozen run counts as the tick's first attempt:
// the job has a retry to give.)
func TestStoppedWorkerLosesItsLeaseBeforeTakeover(t *testing.T) {
	bin := buildWorker(t)
	c, ledger, nodes := processCluster(t)
	// Both workers' clocks read just past a 10-minute boundary, so that the catch-up window
	// gives both the same tick, and the next one is far.
	now := time.Now()
	offset := now.Truncate(10 * time.Minute).Add(10*time.Minute + time.Second).Sub(now)
	args := []string{"-nodes", nodes, "-ledger", ledger.Addr(), "-job", "frozen", "-spec", "@every 10m",
		"-offset", offset.String(), "-ttl", "1s", "-node-timeout", "100ms", "-catchup", "1m", "-duration", "1m", "-retries", "1"}

	a := startWorker(t, bin, "a", append(args, "-work", "1m")...)
	started := waitLedger(t, ledger.Client(), "ledger:started", "a's run to start", func(r record) bool { return r.Replica == "a" })
	a.signal(t, syscall.SIGSTOP)
	tickKey := layout.TickKey(middleware.DefaultPrefix, "frozen", started.Tick)
	require.Eventually(t, func() bool { return c.exists(t, tickKey) == 0 }, waitLimit, 5*time.Millisecond, "a's lock to expire")

	b := startWorker(t, bin, "b", append(args, "-work", "10ms")...)
	recB := waitLedger(t, ledger.Client(), "ledger", "b's run", func(r record) bool { return r.Replica == "b" })
	a.signal(t, syscall.SIGCONT)
	recA := waitLedger(t, ledger.Client(), "ledger", "a's run to end", func(r record) bool { return r.Replica == "a" })
	a.signal(t, syscall.SIGTERM)
	b.signal(t, syscall.SIGTERM)
	a.wait(t)
	b.wait(t)

	assert.True(t, recA.Tick.Equal(recB.Tick), "the same tick")
	assert.True(t, recA.Cancelled, "a's job context is cancelled")
	assert.Contains(t, recA.Cause, "redlock: lease lost")
	assert.False(t, recB.Cancelled)
	assert.True(t, recA.Deadline.Before(recB.Start), "a's lease ended (%v) before b took the tick (%v)", recA.Deadline, recB.Start)
	assert.Greater(t, recB.Token, recA.Token, "the taker's token is larger")
	assert.Equal(t, started.Token, recA.Token)
}
