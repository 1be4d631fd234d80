//go:build linux

package main

import (
	"context"
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

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/supervise"
	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/middleware"
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

// ledgerLines returns the fields of each line of the ledger at path, four each, and fails the
// test at an "overlap" line.
func ledgerLines(t *testing.T, path string) [][]string {
	t.Helper()
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var lines [][]string
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		require.NotEqual(t, "overlap", f[0], "two runs were alive at once:\n%s", data)
		require.Len(t, f, 4, "ledger line %q", line)
		lines = append(lines, f)
	}
	return lines
}

// readLedger returns the runs in the ledger, and fails the test at an "overlap" line.
func readLedger(t *testing.T, path string) []ledgerRun {
	t.Helper()
	var runs []ledgerRun
	for _, f := range ledgerLines(t, path) {
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
	return !supervise.GroupAlive(pgid)
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
	proctest.Eventually(t, "a's first run", func() bool { return len(readLedger(t, ledger)) == 1 })
	b = startProc(t, bin, "b", nil, "run", "--config", cfgB, "--replica", "b")
	b.waitLog(t, `msg="ready: taking ticks"`)
	return a, b, ledger
}

// b's run starts after a's process group is gone, which happened at gone or before.
func requireNoOverlap(t *testing.T, ledger string, gone time.Time) {
	t.Helper()
	proctest.Eventually(t, "b's run", func() bool { return len(readLedger(t, ledger)) == 2 })
	runs := readLedger(t, ledger)
	require.Equal(t, []string{"a", "b"}, []string{runs[0].replica, runs[1].replica})
	assert.True(t, runs[1].start.After(gone), "b's run started at %v, a's run was gone at %v", runs[1].start, gone)
}

// procStat returns the fields of /proc/PID/stat that follow the command's name: state, ppid,
// pgrp, …; nil when pid is gone.
func procStat(pid int) []string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil
	}
	s := string(stat)
	return strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
}

// killGroupExceptLeader sends SIGKILL to every process of the process group pgid but its
// leader: what `kill -9 -- -PGID` does to the group of a daemon that survives it.
func killGroupExceptLeader(t *testing.T, pgid int) {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	require.NoError(t, err)
	killed := 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if f := procStat(pid); len(f) > 2 && f[2] == strconv.Itoa(pgid) && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	require.Positive(t, killed, "no process in the daemon's group but the daemon")
}

// The supervisor bounds a run's processes by its lease, whatever happens to the daemon; the
// daemon bounds them when the supervisor dies.
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
		proctest.Eventually(t, "the frozen daemon's run to be killed", func() bool { return groupGone(pgid) })
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
		proctest.Eventually(t, "the cut-off daemon's run to be killed", func() bool { return groupGone(pgid) })
		requireNoOverlap(t, ledger, time.Now())
		a.waitLog(t, "the lease's deadline is kill_grace away and not extended: SIGTERM to the process group")
		a.waitLog(t, "SIGKILL to the process group")
	})
	t.Run("SIGTERM while a run's supervisor is frozen: the daemon exits after the drain and the kill grace, and keeps the run's locks", func(t *testing.T) {
		t.Parallel()
		node := redistest.Start(t, redistest.Config{})
		endQuarantine(t, node)
		cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig([]*redistest.Server{node})+`jobs:
  - {name: stuck, schedule: '@hourly', catch_up: 1h, command: [sleep, "60"]}
`)
		a := startProc(t, bin, "a", nil, "run", "--config", cfg, "--drain", "300ms", "--kill-grace", "1s")
		pgid := a.runGroup(t)
		supervisor, err := strconv.Atoi(procStat(pgid)[1])
		require.NoError(t, err)
		// Frozen, the supervisor neither stops the command nor reports: the run's handler
		// cannot return.
		require.NoError(t, syscall.Kill(supervisor, syscall.SIGSTOP))
		t.Cleanup(func() {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			_ = syscall.Kill(supervisor, syscall.SIGCONT)
		})
		a.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, a.wait(t))
		out := a.out.String()
		assert.Contains(t, out, `msg="exiting with runs under way: their locks are not released`)
		assert.Contains(t, out, `1 run left, still ending (a later Stop waits for it): job \"stuck\" tick `)
		// The command ran until the daemon exited, and the daemon did not release its lock.
		assert.Equal(t, int64(1), node.Client().Exists(t.Context(), layout.RunKey("cronlock", "stuck")).Val(),
			"the run's lock was released")
		// Then the supervisor's process group (the daemon's) is orphaned with a stopped member:
		// the kernel sends it SIGHUP, which it ignores, and SIGCONT. Continued, it finds the
		// daemon's pipe closed and kills the command's group.
		proctest.Eventually(t, "the run's process group to be gone", func() bool { return groupGone(pgid) })
	})

	// The runs' command sleeps 60 s in a process group of its own; every second a tick comes,
	// which a second run would take as soon as the first run's locks were released. The
	// ledger's flock sees any second run that starts while a process of the first one lives.
	for name, kill := range map[string]func(t *testing.T, a *proc, pgid int){
		"kill -9 of the run's supervisor": func(t *testing.T, _ *proc, pgid int) {
			supervisor, err := strconv.Atoi(procStat(pgid)[1])
			require.NoError(t, err)
			require.NoError(t, syscall.Kill(supervisor, syscall.SIGKILL))
		},
		"kill -9 of the daemon's process group, but the daemon": func(t *testing.T, a *proc, _ int) {
			killGroupExceptLeader(t, a.cmd.Process.Pid)
		},
	} {
		t.Run(name+": the daemon ends the orphans before it releases the run", func(t *testing.T) {
			t.Parallel()
			nodes := redistest.StartN(t, 3, redistest.Config{})
			a, _, ledger := twoReplicas(t, bin, nodes, nil, `jobs:
  - name: long
    schedule: "@every 1s"
    lock_ttl: 3s
    retries: 3
    command: `+ledgerJob("LEDGER", "sleep 60")+"\n")
			pgid := a.runGroup(t)
			kill(t, a, pgid)
			proctest.Eventually(t, "the orphaned process group to be gone", func() bool { return groupGone(pgid) })
			proctest.Eventually(t, "the next run", func() bool { return len(readLedger(t, ledger)) >= 2 })
			a.waitLog(t, "the run's supervisor died and left its process group: SIGKILL to the group")
			select {
			case <-a.done:
				t.Fatalf("the daemon died: %v", a.err)
			default:
			}
		})
	}
}

// tickScript is a job's command that records its run in the ledger $1 — "start TICK ATTEMPT
// REPLICA" once it holds an exclusive flock on $1.lock, "end …" a second later — and exits
// with status $2; "overlap …" if a process of another run still holds the flock.
const tickScript = `exec 9>>"$1.lock"
run="$CRONLOCK_TICK_UNIX_MS $CRONLOCK_ATTEMPT $CRONLOCK_REPLICA"
flock -n 9 || { echo "overlap $run" >>"$1"; exit 0; }
echo "start $run" >>"$1"
sleep 1
echo "end $run" >>"$1"
exit "$2"
`

// tickLine is a line of tickScript's ledger.
type tickLine struct {
	kind, replica string
	tick          int64
	attempt       int
}

// readTickLedger returns the lines of tickScript's ledger, and fails the test at an "overlap" line.
func readTickLedger(t *testing.T, path string) []tickLine {
	t.Helper()
	var lines []tickLine
	for _, f := range ledgerLines(t, path) {
		tick, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err)
		attempt, err := strconv.Atoi(f[2])
		require.NoError(t, err)
		lines = append(lines, tickLine{kind: f[0], tick: tick, attempt: attempt, replica: f[3]})
	}
	return lines
}

// A daemon frozen while its command runs, past the run's lease: a command that exited 0
// inside its lease is a success, never run again; one that failed is retried, after it ended.
func TestFrozenDaemonRunOutcome(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	for _, tc := range []struct {
		name        string
		exit        int
		minAttempts int // the attempts are 1, 2, … up to retries+1 (4), as the tick's window allows
	}{
		{"exit 0: the tick runs once", 0, 1},
		{"exit 1: the tick is retried, never beside another run", 1, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nodes := redistest.StartN(t, 3, redistest.Config{})
			endQuarantine(t, nodes...)
			dir := t.TempDir()
			ledger := dir + "/ledger"
			script := writeFile(t, dir, "job.sh", tickScript)
			cfg := writeFile(t, dir, "c.yaml", nodesConfig(nodes)+fmt.Sprintf(`kill_grace: 500ms
jobs:
  - name: once
    schedule: "@every 10s"
    lock_ttl: 4s
    renew_every: 1s
    retries: 3
    command: [sh, %q, %q, "%d"]
`, script, ledger, tc.exit))
			procs := map[string]*proc{
				"a": startProc(t, bin, "a", nil, "run", "--config", cfg, "--replica", "a"),
				"b": startProc(t, bin, "b", nil, "run", "--config", cfg, "--replica", "b"),
			}
			proctest.Eventually(t, "a first run", func() bool { return len(readTickLedger(t, ledger)) > 0 })
			first := readTickLedger(t, ledger)[0]
			holder := procs[first.replica]
			holder.signal(t, syscall.SIGSTOP)
			t.Cleanup(func() { _ = holder.cmd.Process.Signal(syscall.SIGCONT) })
			require.Len(t, readTickLedger(t, ledger), 1, "the command ended before its daemon was frozen")

			proctest.Eventually(t, "the command's end, its daemon frozen", func() bool { return len(readTickLedger(t, ledger)) == 2 })
			key := layout.TickKey(middleware.DefaultPrefix, "once", time.UnixMilli(first.tick))
			proctest.Eventually(t, "the run's lock to expire on every node", func() bool {
				for _, n := range nodes {
					if n.Client().Exists(context.Background(), key).Val() != 0 {
						return false
					}
				}
				return true
			})
			holder.signal(t, syscall.SIGCONT)
			proctest.Eventually(t, "a run of a later tick", func() bool {
				lines := readTickLedger(t, ledger)
				return lines[len(lines)-1].tick > first.tick
			})
			var attempts []int
			for _, l := range readTickLedger(t, ledger) {
				if l.kind == "start" && l.tick == first.tick {
					attempts = append(attempts, l.attempt)
				}
			}
			require.GreaterOrEqual(t, len(attempts), tc.minAttempts, "runs of the first tick: %v", attempts)
			if tc.exit == 0 {
				require.Len(t, attempts, 1, "runs of the first tick: %v", attempts)
			}
			for i, a := range attempts {
				require.Equal(t, i+1, a, "runs of the first tick, by attempt: %v", attempts)
			}
			if tc.exit == 0 {
				holder.waitLog(t, "command exited 0 before its lease's deadline")
			}
		})
	}
}
