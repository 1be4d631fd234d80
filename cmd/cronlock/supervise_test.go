//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
)

// ledgerJob is the command of a job that records each run in the ledger file: a line "start
// REPLICA TOKEN UNIX_NS" once it holds an exclusive flock on ledger.lock, which it keeps while
// body runs, or "overlap REPLICA UNIX_NS" if a process of another run still holds it. The
// kernel drops the flock when the last process holding it dies, so an "overlap" line means two
// runs were alive at once.
func ledgerJob(ledger, body string) string {
	run := `echo "start $CRONLOCK_REPLICA $CRONLOCK_FENCING_TOKEN $(date +%s%N)" >> "$0"; ` + body
	script := `flock -n "$0.lock" sh -c '` + run + `' "$0" || echo "overlap $CRONLOCK_REPLICA $(date +%s%N)" >> "$0"`
	return fmt.Sprintf("[sh, -c, %s, %s]", strconv.Quote(script), strconv.Quote(ledger))
}

type ledgerRun struct {
	replica string
	start   time.Time
}

// readLedger returns the runs in the ledger, and fails the test at an "overlap" line.
func readLedger(t *testing.T, path string) []ledgerRun {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var runs []ledgerRun
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		require.NotEqual(t, "overlap", f[0], "two runs of a forbid job were alive at once:\n%s", data)
		require.Len(t, f, 4, "ledger line %q", line)
		ns, err := strconv.ParseInt(f[3], 10, 64)
		require.NoError(t, err)
		runs = append(runs, ledgerRun{replica: f[1], start: time.Unix(0, ns)})
	}
	return runs
}

var runStarted = regexp.MustCompile(`msg="run started" job=\S+ tick=\S+ token=\d+ attempt=\d+ pid=(\d+)`)

// runGroup returns the process group of the process's first run (the command's pid).
func (p *proc) runGroup(t *testing.T) int {
	t.Helper()
	p.waitLog(t, `msg="run started"`)
	pgid, err := strconv.Atoi(runStarted.FindStringSubmatch(p.out.String())[1])
	require.NoError(t, err)
	return pgid
}

// groupGone reports whether no process of the group pgid runs (zombies excepted: the reaper of
// orphans may be slow, or absent, in a container).
func groupGone(pgid int) bool {
	return errors.Is(syscall.Kill(-pgid, 0), syscall.ESRCH) || onlyZombies(pgid)
}

// twoReplicas starts daemons a and b, a first: it takes the job's first run, then b starts.
// addrsA, when not nil, are the nodes' addresses for a. It returns a, b and the ledger.
func twoReplicas(t *testing.T, bin string, nodes []*redistest.Server, addrsA []string, jobYAML string) (a, b *proc, ledger string) {
	t.Helper()
	dir := t.TempDir()
	ledger = dir + "/ledger"
	endQuarantine(t, nodes...)
	cfgB := writeFile(t, dir, "b.yaml", nodesConfig(nodes)+strings.ReplaceAll(jobYAML, "LEDGER", ledger))
	cfgA := cfgB
	if addrsA != nil {
		cfgA = writeFile(t, dir, "a.yaml", `nodes: ["`+strings.Join(addrsA, `", "`)+"\"]\n"+strings.ReplaceAll(jobYAML, "LEDGER", ledger))
	}
	a = startProc(t, bin, "a", nil, "run", "--config", cfgA, "--replica", "a")
	eventually(t, "a's first run", func() bool { return len(readLedger(t, ledger)) == 1 })
	b = startProc(t, bin, "b", nil, "run", "--config", cfgB, "--replica", "b")
	b.waitLog(t, `msg="ready: taking ticks"`)
	return a, b, ledger
}

// b's run starts after a's process group is gone, which happened at gone or before.
func requireNoOverlap(t *testing.T, ledger string, gone time.Time) {
	t.Helper()
	eventually(t, "b's run", func() bool { return len(readLedger(t, ledger)) == 2 })
	runs := readLedger(t, ledger)
	require.Equal(t, []string{"a", "b"}, []string{runs[0].replica, runs[1].replica})
	assert.True(t, runs[1].start.After(gone), "b's run started at %v, a's run was gone at %v", runs[1].start, gone)
}

// The supervisor bounds a run's processes by its lease, whatever happens to the daemon.
func TestSupervisor(t *testing.T) {
	bin := buildBinary(t, t.TempDir())

	t.Run("kill -9 of the daemon: the run's process group is gone within a second", func(t *testing.T) {
		t.Parallel()
		nodes := redistest.StartN(t, 3, redistest.Config{})
		a, _, ledger := twoReplicas(t, bin, nodes, nil, `jobs:
  - name: long
    schedule: "@every 1s"
    lock_ttl: 3s
    command: `+ledgerJob("LEDGER", "sleep 60")+"\n")
		pgid := a.runGroup(t)
		a.signal(t, syscall.SIGKILL)
		killed := time.Now()
		for !groupGone(pgid) {
			require.Less(t, time.Since(killed), time.Second, "the run's processes outlived the daemon")
			time.Sleep(5 * time.Millisecond)
		}
		requireNoOverlap(t, ledger, time.Now())
	})

	t.Run("SIGSTOP of the daemon: its command is killed at the lease's deadline", func(t *testing.T) {
		t.Parallel()
		nodes := redistest.StartN(t, 3, redistest.Config{})
		a, _, ledger := twoReplicas(t, bin, nodes, nil, `kill_grace: 1s
jobs:
  - name: long
    schedule: "@every 1s"
    lock_ttl: 3s
    command: `+ledgerJob("LEDGER", `trap "" TERM; sleep 60`)+"\n")
		pgid := a.runGroup(t)
		a.signal(t, syscall.SIGSTOP)
		t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
		eventually(t, "the frozen daemon's run to be killed", func() bool { return groupGone(pgid) })
		requireNoOverlap(t, ledger, time.Now())
	})

	t.Run("lease lost, SIGTERM ignored, kill_grace 10s: no overlap", func(t *testing.T) {
		t.Parallel()
		nodes := redistest.StartN(t, 3, redistest.Config{})
		var proxies []*faultproxy.Proxy
		var addrs []string
		for _, n := range nodes {
			p := faultproxy.Start(t, n.Addr())
			proxies = append(proxies, p)
			addrs = append(addrs, p.Addr())
		}
		a, _, ledger := twoReplicas(t, bin, nodes, addrs, `kill_grace: 10s
jobs:
  - name: long
    schedule: "@every 1s"
    lock_ttl: 12s
    renew_every: 1s
    command: `+ledgerJob("LEDGER", `trap "" TERM; sleep 60`)+"\n")
		pgid := a.runGroup(t)
		for _, p := range proxies {
			p.Blackhole(true)
		}
		eventually(t, "the cut-off daemon's run to be killed", func() bool { return groupGone(pgid) })
		requireNoOverlap(t, ledger, time.Now())
		a.waitLog(t, "the lease's deadline is kill_grace away and not extended: SIGTERM to the process group")
		a.waitLog(t, "SIGKILL to the process group")
	})
}
