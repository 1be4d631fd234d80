//go:build unix

package main

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cronlocklockkeys "github.com/cronlock/cronlock/cmd/cronlock/internal/lockkeys"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
)

// nodesConfig returns the nodes: line of a config for servers.
func nodesConfig(servers []*redistest.Server) string {
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, strconv.Quote(s.Addr()))
	}
	return "nodes: [" + strings.Join(addrs, ", ") + "]\n"
}

// endQuarantine marks the (new, empty) servers as booted long ago, as `cronlock check
// --end-quarantine` does.
func endQuarantine(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		require.NoError(t, s.Client().Set(context.Background(), "cronlock:boot", "0", 0).Err())
	}
}

func port(s *redistest.Server) string {
	_, p, _ := net.SplitHostPort(s.Addr())
	return p
}

// TestCLI runs the cronlock binary, built once for all its subtests, against real
// redis-server processes.
func TestCLI(t *testing.T) {
	bin := buildBinary(t, t.TempDir())

	t.Run("operators", func(t *testing.T) {
		t.Parallel()
		testOperators(t, bin)
	})

	t.Run("validate", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		good := writeFile(t, dir, "good.yaml", "nodes: [a:1, b:1, c:1]\njobs:\n  - {name: j, schedule: '@every 10s', command: [sh, -c, 'true']}\n")
		code, out := runBin(t, bin, nil, "validate", "--config", good)
		assert.Equal(t, 0, code, out)
		assert.Contains(t, out, good+": ok")
		assert.Contains(t, out, "nodes: 3, quorum 2: a:1, b:1, c:1")

		bad := writeFile(t, dir, "bad.yaml", "nodes: [a:1, b:1, c:1]\njobs:\n  - name: j\n    schedule: '@every 10s'\n    command: [x]\n    timeout: 10x\n")
		code, out = runBin(t, bin, nil, "validate", "--config", bad)
		assert.Equal(t, 2, code, out)
		assert.Equal(t, "cronlock: "+bad+`:6: jobs[0].timeout: "10x" is not a duration (e.g. 10m, 90s)`+"\n", out)

		// validate makes every check that run makes, and names the YAML key.
		short := writeFile(t, dir, "short.yaml", "nodes: [a:1, b:1, c:1]\njobs:\n  - {name: j, schedule: '@every 10s', command: [x], lock_ttl: 1ms}\n")
		want := "cronlock: " + short + ":3: jobs[0].lock_ttl: "
		code, out = runBin(t, bin, nil, "validate", "--config", short)
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, want)
		assert.NotContains(t, out, "Options.")
		code, runOut := runBin(t, bin, nil, "run", "--config", short)
		assert.Equal(t, 2, code, runOut)
		assert.Contains(t, runOut, strings.TrimSpace(strings.TrimPrefix(out, "cronlock: ")), "validate and run refuse it alike")

		// H is shown resolved (from the job's name), then as written; a jitter beside it, and the
		// next tick's delay after the tick. A jitter that does not fit between ticks is refused.
		hashed := writeFile(t, dir, "hashed.yaml", "nodes: [a:1, b:1, c:1]\njobs:\n  - {name: backup, schedule: 'H H * * *', jitter: 10m, command: [sh, -c, 'true']}\n")
		code, out = runBin(t, bin, nil, "validate", "--config", hashed)
		assert.Equal(t, 0, code, out)
		assert.Regexp(t, `backup  33 14 \* \* \* \(H H \* \* \*\)  10m0s   \d{4}-\d\d-\d\dT14:33:00Z \+\d+m[\d.]+s`, out)
		tight := writeFile(t, dir, "tight.yaml", "nodes: [a:1, b:1, c:1]\njobs:\n  - name: j\n    schedule: '*/5 * * * *'\n    jitter: 5m\n    command: [x]\n")
		code, out = runBin(t, bin, nil, "validate", "--config", tight)
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, tight+`:3: jobs[0].jitter: 5m0s is not shorter than the 5m0s between ticks of "*/5 * * * *"`)

		code, out = runBin(t, bin, nil, "validate", "--config", filepath.Join(dir, "missing.yaml"))
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, "no such file or directory")
	})

	t.Run("run: bad config, bad usage, unset password, HTTP address taken", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		bad := writeFile(t, dir, "bad.yaml", "nodes: [a:1, b:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n")
		code, out := runBin(t, bin, nil, "run", "--config", bad)
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, bad+":1: nodes: 2 nodes is an even count")

		code, out = runBin(t, bin, nil, "run")
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, "run: give the config file with --config FILE")

		code, out = runBin(t, bin, nil, "run", "--config", bad, "--drain", "-1s")
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, "--drain -1s: must not be negative")

		secret := writeFile(t, dir, "secret.yaml", "nodes:\n  - {addr: 'a:1', password_env: CRONLOCK_TEST_UNSET_PW}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n")
		code, out = runBin(t, bin, nil, "run", "--config", secret)
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, secret+":2: nodes[0].password_env: environment variable CRONLOCK_TEST_UNSET_PW is not set")

		// So is the token's variable, unset or empty, when the daemon serves HTTP; validate warns.
		tokenCfg := writeFile(t, dir, "token.yaml", "nodes: [a:1, b:1, c:1]\nhttp: 127.0.0.1:0\nhttp_token_env: CRONLOCK_TEST_UNSET_TOKEN\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n")
		for _, tc := range []struct{ env, want string }{{"", "not set"}, {"CRONLOCK_TEST_UNSET_TOKEN=", "empty"}} {
			code, out = runBin(t, bin, []string{tc.env}, "run", "--config", tokenCfg)
			assert.Equal(t, 2, code, out)
			assert.Contains(t, out, tokenCfg+":3: http_token_env: environment variable CRONLOCK_TEST_UNSET_TOKEN is "+tc.want+": export it with the bearer token", out)
			code, out = runBin(t, bin, []string{tc.env}, "validate", "--config", tokenCfg)
			assert.Equal(t, 0, code, out)
			assert.Contains(t, out, "warning: "+tokenCfg+":3: http_token_env: environment variable CRONLOCK_TEST_UNSET_TOKEN is "+tc.want)
		}

		// The password is used, and never printed.
		code, out = runBin(t, bin, []string{"CRONLOCK_TEST_UNSET_PW=hunter2-secret"}, "locks", "--config", secret, "--timeout", "200ms")
		assert.Equal(t, 1, code, out)
		assert.NotContains(t, out, "hunter2-secret")

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		node := redistest.Start(t, redistest.Config{})
		cfg := writeFile(t, dir, "taken.yaml", nodesConfig([]*redistest.Server{node})+"http: "+ln.Addr().String()+"\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n")
		code, out = runBin(t, bin, nil, "run", "--config", cfg)
		assert.Equal(t, 1, code, out)
		assert.Contains(t, out, `msg="cronlock run" err="http: listen tcp `+ln.Addr().String())
	})

	t.Run("run: a job's env and working_dir", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		work := t.TempDir()
		node := redistest.Start(t, redistest.Config{})
		endQuarantine(t, node)
		out := filepath.Join(dir, "out")
		cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+fmt.Sprintf(`jobs:
  - name: envy
    schedule: "@every 1s"
    working_dir: %s
    env: {MODE: fast, SECRET_env: CRONLOCK_TEST_SECRET}
    command: [sh, -c, 'echo "$MODE $SECRET $(pwd)" > %s']
`, work, out))
		code, vout := runBin(t, bin, nil, "validate", "--config", cfg)
		assert.Equal(t, 0, code, vout)
		assert.Contains(t, vout, "warning: "+cfg+":6: jobs[0].env.SECRET_env: environment variable CRONLOCK_TEST_SECRET is not set")
		code, rout := runBin(t, bin, nil, "run", "--config", cfg)
		assert.Equal(t, 2, code, rout)
		assert.Contains(t, rout, "jobs[0].env.SECRET_env: environment variable CRONLOCK_TEST_SECRET is not set")

		p := startProc(t, bin, "envy", []string{"CRONLOCK_TEST_SECRET=s3"}, "run", "--config", cfg)
		proctest.Eventually(t, "a run", func() bool { b, _ := os.ReadFile(out); return len(b) > 0 })
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		assert.Equal(t, "fast s3 "+work+"\n", string(b))
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
	})

	t.Run("run: three replicas run each tick once", func(t *testing.T) {
		t.Parallel()
		testThreeReplicas(t, bin)
	})

	t.Run("run: a job that outlives its timeout has its process group killed", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		node := redistest.Start(t, redistest.Config{})
		endQuarantine(t, node)
		pids := filepath.Join(dir, "pids")
		cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+fmt.Sprintf(`jobs:
  - name: stuck
    schedule: "@every 1s"
    timeout: 300ms
    command: ["sh", "-c", "trap '' TERM; sleep 30 & echo $! >> %s; echo $$ >> %s; wait"]
`, pids, pids))
		p := startProc(t, bin, "stuck", nil, "run", "--config", cfg, "--kill-grace", "200ms")
		p.waitLog(t, "SIGKILL to the process group")
		p.waitLog(t, "outcome=failed")
		for _, pid := range proctest.ReadPIDs(t, pids)[:2] {
			proctest.Eventually(t, "the job's processes to exit", func() bool { return proctest.ProcessGone(pid) })
		}
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
		out := p.out.String()
		assert.Contains(t, out, "stopping the command: SIGTERM to its process group")
		assert.Contains(t, out, `outcome=failed err="middleware: job timed out: command stopped (killed by signal killed)"`)
	})

	t.Run("run: SIGTERM drains a running job, then exits 0", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		node := redistest.Start(t, redistest.Config{})
		endQuarantine(t, node)
		marks := filepath.Join(dir, "marks")
		cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+fmt.Sprintf(`jobs:
  - name: slow
    schedule: "@every 1s"
    command: ["sh", "-c", "echo start >> %s; sleep 1; echo done >> %s"]
`, marks, marks))
		p := startProc(t, bin, "drain", nil, "run", "--config", cfg)
		proctest.Eventually(t, "a run to start", func() bool { b, _ := os.ReadFile(marks); return len(b) > 0 })
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
		b, err := os.ReadFile(marks)
		require.NoError(t, err)
		assert.Equal(t, strings.Count(string(b), "start"), strings.Count(string(b), "done"), "every run finished:\n%s", b)
		assert.Contains(t, p.out.String(), "stopping: no new ticks; waiting for running jobs")
		assert.Contains(t, p.out.String(), "msg=stopped")
		assert.NotContains(t, p.out.String(), "SIGTERM to its process group")
	})

	t.Run("run: after --drain, or at a second signal, running jobs are stopped; exit 0", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		node := redistest.Start(t, redistest.Config{})
		endQuarantine(t, node)
		cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+`min_interval: 100ms
jobs:
  - name: endless
    schedule: "@every 500ms"
    command: ["sleep", "30"]
`)
		p := startProc(t, bin, "drain-timeout", nil, "run", "--config", cfg, "--drain", "300ms")
		p.waitLog(t, "run started")
		p.signal(t, syscall.SIGINT)
		assert.Equal(t, 0, p.wait(t))
		assert.Contains(t, p.out.String(), "running jobs were stopped before they finished")
		assert.Contains(t, p.out.String(), "--drain 300ms passed")

		p = startProc(t, bin, "second-signal", nil, "run", "--config", cfg)
		p.waitLog(t, "run started")
		p.signal(t, syscall.SIGTERM)
		p.waitLog(t, "stopping: no new ticks")
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
		assert.Contains(t, p.out.String(), "second signal: stopping running jobs now")
	})

	t.Run("check warns with the fix, and exits 1 without a quorum", func(t *testing.T) {
		t.Parallel()
		testCheck(t, bin)
	})

	t.Run("check --end-quarantine with the nodes on the command line, or a config without jobs", func(t *testing.T) {
		t.Parallel()
		testCheckNodes(t, bin)
	})
}

// ledgerEntry is one run, as the job's command recorded it.
type ledgerEntry struct {
	tick    int64
	replica string
	token   uint64
}

// Three `cronlock run` processes on three real nodes: each tick runs once, on one of them,
// with fencing tokens that increase with the tick. Then locks and check read the nodes.
func testThreeReplicas(t *testing.T, bin string) {
	dir := t.TempDir()
	nodes := redistest.StartN(t, 3, redistest.Config{})
	ledger := redistest.Start(t, redistest.Config{})
	const every = 500 * time.Millisecond
	cfg := writeFile(t, dir, "cronlock.yaml", nodesConfig(nodes)+tickLedgerJob(every, ledger))

	code, out := runBin(t, bin, nil, "check", "--config", cfg, "--end-quarantine")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "quarantine ended on every node (boot marker cronlock:boot set to 0)")

	var procs []*proc
	for i := range 3 {
		name := fmt.Sprintf("r%d", i+1)
		procs = append(procs, startProc(t, bin, name, nil, "run", "--config", cfg, "--replica", name))
	}
	ctx := context.Background()
	proctest.Eventually(t, "ten runs", func() bool { return ledger.Client().LLen(ctx, "ledger").Val() >= 10 })
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		assert.Equal(t, 0, p.wait(t), "%s:\n%s", p.name, p.out.String())
	}

	entries := checkedLedger(t, ledger, every)
	ran := map[string]int{}
	for _, e := range entries {
		ran[e.replica]++
	}
	t.Logf("%d ticks, runs per replica: %v", len(entries), ran)

	// locks shows the done ticks of the job on every node, with holder and token, and never a
	// whole lock value.
	code, out = runBin(t, bin, nil, "locks", "--config", cfg, "--job", "ledger")
	require.Equal(t, 0, code, out)
	last := entries[len(entries)-1]
	assert.Contains(t, out, "keys {cronlock:ledger}:* on 3 nodes (quorum 2)")
	assert.Contains(t, out, "JOB     KEY")
	lastTick := time.UnixMilli(last.tick).UTC().Format(time.RFC3339Nano)
	assert.Regexp(t, `ledger +tick `+lastTick+` +127\.0\.0\.1:\d+ +done +`+last.replica+` +`+strconv.FormatUint(last.token, 10)+` +[\dms.]+ +[0-9a-f]{6}…`, out)
	assert.Regexp(t, `ledger +fence +127\.0\.0\.1:\d+ +- +- +\d+ +none`, out)
	tickKey := fmt.Sprintf("{cronlock:ledger}:tick:%d", last.tick)
	value, err := nodes[0].Client().HGet(ctx, tickKey, "v").Result()
	if err != nil { // the tick may have been taken on the two other nodes only
		value, err = nodes[1].Client().HGet(ctx, tickKey, "v").Result()
	}
	require.NoError(t, err)
	assert.NotContains(t, out, value, "a whole lock value was printed")
	assert.Contains(t, out, value[:cronlocklockkeys.ValuePrefix]+"…")

	code, out = runBin(t, bin, nil, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	for _, want := range []string{
		"answers     yes, PING ",
		"version     7.",
		"persistence none: a restarted node comes back empty, and its quarantine covers it",
		"eviction    maxmemory-policy noeviction",
		"quarantine  none: ended by an operator (cronlock:boot is 0)",
		"clock       ",
		"3 of 3 nodes answer, quorum 2",
		"no warnings",
	} {
		assert.Contains(t, out, want)
	}
}

// tickLedgerJob returns the min_interval: and jobs: of a config with one job, ledger, run every
// every, whose command appends "tick replica token" to the list ledger on the server ledger.
func tickLedgerJob(every time.Duration, ledger *redistest.Server) string {
	return fmt.Sprintf(`min_interval: 100ms
jobs:
  - name: ledger
    schedule: "@every %v"
    command: ["sh", "-c", "redis-cli -p %s RPUSH ledger \"$CRONLOCK_TICK_UNIX_MS $CRONLOCK_REPLICA $CRONLOCK_FENCING_TOKEN\""]
`, every, port(ledger))
}

// checkedLedger reads the ledger of a job run every every, ordered by tick, and checks it: each
// tick is on the schedule and ran once, none was missed, and fencing tokens increase with the
// tick.
func checkedLedger(t *testing.T, ledger *redistest.Server, every time.Duration) []ledgerEntry {
	t.Helper()
	entries, missed := ledgerWithMisses(t, ledger, every)
	assert.Empty(t, missed, "ticks missed")
	return entries
}

// ledgerWithMisses reads the ledger of a job run every every, ordered by tick, checks that each tick
// is on the schedule and ran once and that fencing tokens increase with the tick, and returns
// the entries and the ticks missed between the first entry and the last.
func ledgerWithMisses(t *testing.T, ledger *redistest.Server, every time.Duration) (entries []ledgerEntry, missed []int64) {
	t.Helper()
	raw, err := ledger.Client().LRange(context.Background(), "ledger", 0, -1).Result()
	require.NoError(t, err)
	for _, line := range raw {
		var e ledgerEntry
		_, err := fmt.Sscan(line, &e.tick, &e.replica, &e.token)
		require.NoError(t, err, "ledger entry %q", line)
		entries = append(entries, e)
	}
	slices.SortFunc(entries, func(a, b ledgerEntry) int { return cmp.Compare(a.tick, b.tick) })
	for i, e := range entries {
		assert.Zero(t, e.tick%every.Milliseconds(), "tick %d is not on the schedule", e.tick)
		if i == 0 {
			continue
		}
		prev := entries[i-1]
		assert.NotEqual(t, prev.tick, e.tick, "tick %d ran twice: %v and %v", e.tick, prev, e)
		for m := prev.tick + every.Milliseconds(); m < e.tick; m += every.Milliseconds() {
			missed = append(missed, m)
		}
		assert.Greater(t, e.token, prev.token, "fencing token of tick %d is not above the previous tick's", e.tick)
	}
	return entries, missed
}

func testCheck(t *testing.T, bin string) {
	dir := t.TempDir()
	nodes := redistest.StartN(t, 3, redistest.Config{})
	cfg := writeFile(t, dir, "c.yaml", nodesConfig(nodes)+"jobs: [{name: j, schedule: '@hourly', command: [x]}]\n")
	ctx := context.Background()
	c := nodes[0].Client()
	require.NoError(t, c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err())
	require.NoError(t, c.ConfigSet(ctx, "save", "3600 1").Err())
	require.NoError(t, nodes[1].Client().ConfigSet(ctx, "appendonly", "yes").Err())
	require.NoError(t, nodes[1].Client().ConfigSet(ctx, "appendfsync", "everysec").Err())
	// Node 2 is in quarantine: it came back without its data a moment ago.
	require.NoError(t, nodes[2].Client().Set(ctx, "cronlock:boot", time.Now().Add(time.Minute).UnixMicro(), 0).Err())

	code, out := runBin(t, bin, nil, "check", "--config", cfg)
	require.Equal(t, 0, code, out)
	n0, n1, n2 := nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr()
	for _, want := range []string{
		"eviction    maxmemory-policy allkeys-lru",
		"persistence AOF off, RDB snapshots on (save \"3600 1\")",
		"persistence AOF on, appendfsync everysec",
		"quarantine  IN QUARANTINE for ",
		"quarantine  no boot marker (cronlock:boot)",
		"3 of 3 nodes answer, quorum 2",
		"- " + n0 + ": maxmemory-policy is allkeys-lru: under memory pressure the node may evict fencing counters and boot markers, which have no TTL, and break the order of fencing tokens. Fix: CONFIG SET maxmemory-policy noeviction, and put maxmemory-policy noeviction in redis.conf",
		"- " + n0 + ": RDB snapshots without AOF: after a restart the node reloads an old snapshot, with its boot marker but without its latest locks, and skips its quarantine. Fix: CONFIG SET save \"\" and put save \"\" in redis.conf, or turn on AOF with appendfsync always",
		"- " + n0 + ": no boot marker cronlock:boot: the node is new, or lost its memory; the first lock attempt starts its quarantine, and it refuses locks for max_ttl (1m0s). Fix, on first deployment only: cronlock check --config " + cfg + " --end-quarantine",
		"- " + n1 + ": AOF with appendfsync everysec can lose the last writes in a crash",
		"- " + n2 + ": in quarantine for ",
	} {
		assert.Contains(t, out, want)
	}

	require.NoError(t, nodes[1].Kill())
	require.NoError(t, nodes[2].Kill())
	code, out = runBin(t, bin, nil, "check", "--config", cfg, "--timeout", "500ms")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "answers     no: ")
	assert.Contains(t, out, "1 of 3 nodes answer, quorum 2")
	assert.Contains(t, out, "- "+n1+": does not answer (")
	assert.Contains(t, out, "cronlock: only 1 of 3 nodes answer, fewer than the quorum of 2: no lock can be taken")

	code, out = runBin(t, bin, nil, "locks", "--config", cfg, "--timeout", "500ms")
	assert.Equal(t, 1, code, out)
	assert.Contains(t, out, "cronlock: only 1 of 3 nodes answered, fewer than the quorum of 2")
}

// check takes the nodes from --nodes, with no config file, and ends their quarantine; a config
// with nodes and no jobs does as well. Its fixes name the flag the nodes came from.
func testCheckNodes(t *testing.T, bin string) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
	}
	list := strings.Join(addrs, ",")
	ctx := context.Background()
	bootMarkers := func() (out []string) {
		for _, n := range nodes {
			v, _ := n.Client().Get(ctx, "cronlock:boot").Result()
			out = append(out, v)
		}
		return out
	}

	code, out := runBin(t, bin, nil, "check", "--nodes", list)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "3 of 3 nodes answer, quorum 2")
	assert.Contains(t, out, "Fix, on first deployment only: cronlock check --nodes "+list+" --end-quarantine")
	code, out = runBin(t, bin, nil, "check", "--nodes", list, "--end-quarantine")
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "quarantine ended on every node (boot marker cronlock:boot set to 0)")
	assert.Contains(t, out, "no warnings")
	assert.Equal(t, []string{"0", "0", "0"}, bootMarkers())

	for _, n := range nodes {
		require.NoError(t, n.Client().Del(ctx, "cronlock:boot").Err())
	}
	cfg := writeFile(t, t.TempDir(), "nodes.yaml", nodesConfig(nodes))
	code, out = runBin(t, bin, nil, "check", "--config", cfg, "--end-quarantine")
	require.Equal(t, 0, code, out)
	assert.Equal(t, []string{"0", "0", "0"}, bootMarkers(), "a config without jobs")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"check", "--nodes", list, "--config", cfg}, "check: give --config FILE or --nodes, not both"},
		{[]string{"check"}, "check: give the config file with --config FILE, or the nodes with --nodes HOST:PORT,HOST:PORT,HOST:PORT"},
		{[]string{"check", "--nodes", addrs[0] + ",nope"}, "--nodes: nodes[1]: "},
		{[]string{"check", "--nodes", addrs[0] + "," + addrs[1]}, "--nodes: nodes: 2 nodes is an even count"},
	} {
		code, out := runBin(t, bin, nil, tc.args...)
		assert.Equal(t, 2, code, "%q: %s", tc.args, out)
		assert.Contains(t, out, tc.want, "%q", tc.args)
	}
}

// testOperators: the control commands record who asks (--by, default user@host), status
// shows who paused, and their output is exactly what they print, with no log line, even
// while a node is down.
func testOperators(t *testing.T, bin string) {
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	cfg := writeFile(t, t.TempDir(), "c.yaml", nodesConfig(nodes)+"jobs:\n  - {name: tick, schedule: '@yearly', command: ['true']}\n")
	require.NoError(t, nodes[2].Stop()) // a minority down: the commands work, and keep quiet about it

	code, out := runBin(t, bin, nil, "pause", "tick", "--config", cfg, "--reason", "migration", "--by", "alice")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "paused tick by alice: migration\n", out)
	code, out = runBin(t, bin, nil, "status", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `^JOB +PAUSED +LAST RUN +RUNNING\ntick +since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC by alice: migration +none recorded +no\n$`, out)
	code, out = runBin(t, bin, nil, "resume", "tick", "--config", cfg, "--by", "alice")
	require.Equal(t, 0, code, out)
	assert.Equal(t, "resumed tick\n", out)

	u, err := user.Current()
	require.NoError(t, err)
	host, err := os.Hostname()
	require.NoError(t, err)
	code, out = runBin(t, bin, nil, "pause", "tick", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "paused tick by "+u.Username+"@"+host+": paused with cronlock pause\n", out, "--by defaults to user@host")
	code, out = runBin(t, bin, nil, "status", "tick", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, " UTC by "+u.Username+"@"+host+": paused with cronlock pause")

	code, out = runBin(t, bin, nil, "trigger", "tick", "--config", cfg, "--by", "bob")
	require.Equal(t, 0, code, out)
	assert.Regexp(t, `^\d+-[0-9a-f]{16}\n$`, out)
	code, out = runBin(t, bin, nil, "history", "tick", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Equal(t, "START (UTC)  RUN  ATTEMPT  OUTCOME  REPLICA  DURATION  TOKEN  TRACE  ERROR\n", out)

	for _, by := range []string{"", "a\tb"} {
		code, out = runBin(t, bin, nil, "pause", "tick", "--config", cfg, "--by", by)
		assert.Equal(t, 2, code, out)
		assert.Contains(t, out, "cronlock: pause: --by: scheduler: operator name ")
	}
}
