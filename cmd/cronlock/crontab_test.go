//go:build unix

package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/redistest"
)

// crontabLedger is a crontab whose lines each tick every 2 seconds and append "job tick
// replica what" to the list ledger on the ledger server (port): a variable line that the
// commands use, a quoted one, CRON_TZ, 6-field lines, a descriptor (@every) and a line with
// % (its input, read back) and \%. A @yearly line never ticks in the test.
const crontabLedger = `# every line ticks every 2 seconds
LEDGER=redis-cli -p %s RPUSH ledger
GREETING = "hello world"
CRON_TZ=Asia/Kolkata
# cronlock: name=six lock_ttl=5s
*/2 * * * * * $LEDGER "$CRONLOCK_JOB $CRONLOCK_TICK_UNIX_MS $CRONLOCK_REPLICA $GREETING"
@every 2s $LEDGER "$CRONLOCK_JOB $CRONLOCK_TICK_UNIX_MS $CRONLOCK_REPLICA every"
*/2 * * * * * read a; read b; $LEDGER "$CRONLOCK_JOB $CRONLOCK_TICK_UNIX_MS $CRONLOCK_REPLICA $a/$b/$(printf '\%%s' 100\%%)"%%one%%two
@yearly /bin/true
`

// crontabTick is every line's interval, in milliseconds.
const crontabTick = 2000

// crontabRuns reads the ledger: each job's ticks, in order, after checking that every entry
// says what its line says, that no tick ran twice and that none was missed between a job's
// first and last.
func crontabRuns(t *testing.T, ledger *redistest.Server) map[string][]int64 {
	t.Helper()
	raw, err := ledger.Client().LRange(context.Background(), "ledger", 0, -1).Result()
	require.NoError(t, err)
	ticks := map[string][]int64{}
	replicas := map[string]int{}
	for _, line := range raw {
		f := strings.SplitN(line, " ", 4)
		require.Len(t, f, 4, "ledger entry %q", line)
		tick, err := strconv.ParseInt(f[1], 10, 64)
		require.NoError(t, err, "ledger entry %q", line)
		want := map[string]string{"six": "hello world", "added": "added"}[f[0]]
		switch {
		case strings.HasPrefix(f[0], "ledger-cronlock-job-"):
			want = "every"
		case strings.HasPrefix(f[0], "read-a-read-b-"):
			want = "one/two/100%"
		}
		assert.Equal(t, want, f[3], "what the run of %s wrote", f[0])
		ticks[f[0]] = append(ticks[f[0]], tick)
		replicas[f[2]]++
	}
	for job, ts := range ticks {
		slices.Sort(ts)
		for i, tick := range ts {
			assert.Zero(t, tick%crontabTick, "%s: tick %d is not on the schedule", job, tick)
			if i > 0 {
				assert.NotEqual(t, ts[i-1], tick, "%s: tick %d ran twice", job, tick)
				assert.Equal(t, int64(crontabTick), tick-ts[i-1], "%s: ticks missed between %d and %d", job, ts[i-1], tick)
			}
		}
	}
	t.Logf("runs per replica: %v", replicas)
	return ticks
}

// startCrontabReplicas starts three daemons of cfg.
func startCrontabReplicas(t *testing.T, bin, cfg string) []*proc {
	t.Helper()
	var procs []*proc
	for i := range 3 {
		name := fmt.Sprintf("r%d", i+1)
		procs = append(procs, startProc(t, bin, name, nil, "run", "--config", cfg, "--replica", name))
	}
	return procs
}

// stopAll stops the daemons with SIGTERM; each exits 0.
func stopAll(t *testing.T, procs []*proc) {
	t.Helper()
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		assert.Equal(t, 0, p.wait(t), "%s:\n%s", p.name, p.out.String())
	}
}

// Three `cronlock run` daemons on three real nodes run a crontab: every tick of every line
// once. SIGHUP reloads the crontab. Then the YAML of `import-crontab` passes validate, and
// three daemons of it run the same jobs, under the same names, once per tick.
func TestCrontabThreeReplicas(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	dir := t.TempDir()
	nodes := redistest.StartN(t, 3, redistest.Config{})
	endQuarantine(t, nodes...)
	ledger := redistest.Start(t, redistest.Config{})
	crontab := fmt.Sprintf(crontabLedger, port(ledger))
	writeFile(t, dir, "crontab", crontab)
	cfg := writeFile(t, dir, "c.yaml", nodesConfig(nodes)+"crontab: crontab\n")

	code, out := runBin(t, bin, nil, "validate", "--config", cfg)
	require.Equal(t, 0, code, out)
	assert.Contains(t, out, "CRON_TZ=Asia/Kolkata */2 * * * * *")

	// count: at least jobs jobs ran, each at least runs times.
	count := func(jobs, runs int) func() bool {
		return func() bool {
			n := map[string]int{}
			for _, line := range ledger.Client().LRange(context.Background(), "ledger", 0, -1).Val() {
				job, _, _ := strings.Cut(line, " ")
				n[job]++
			}
			return len(n) >= jobs && !slices.ContainsFunc(slices.Collect(maps.Values(n)), func(c int) bool { return c < runs })
		}
	}
	procs := startCrontabReplicas(t, bin, cfg)
	proctest.Eventually(t, "three lines with four runs each", count(3, 4))

	// SIGHUP reloads the crontab: a line added runs.
	writeFile(t, dir, "crontab", crontab+"# cronlock: name=added\n*/2 * * * * * $LEDGER \"$CRONLOCK_JOB $CRONLOCK_TICK_UNIX_MS $CRONLOCK_REPLICA added\"\n")
	for _, p := range procs {
		p.signal(t, syscall.SIGHUP)
	}
	for _, p := range procs {
		p.waitLog(t, "msg=reloaded file="+cfg+" jobs=5 added=1 changed=0 removed=0")
	}
	proctest.Eventually(t, "three runs of the added line", count(4, 3))
	stopAll(t, procs)
	fromCrontab := crontabRuns(t, ledger)
	require.Len(t, fromCrontab, 4, "the jobs that ran: %v", fromCrontab)

	// import-crontab prints the YAML jobs of the crontab; a config with them passes validate
	// and runs the same jobs.
	code, yaml := runBin(t, bin, nil, "import-crontab", filepath.Join(dir, "crontab"))
	require.Equal(t, 0, code, yaml)
	imported := writeFile(t, dir, "imported.yaml", nodesConfig(nodes)+yaml)
	code, out = runBin(t, bin, nil, "validate", "--config", imported)
	require.Equal(t, 0, code, out)
	require.NoError(t, ledger.Client().Del(context.Background(), "ledger").Err())
	procs = startCrontabReplicas(t, bin, imported)
	proctest.Eventually(t, "four jobs with three runs each", count(4, 3))
	stopAll(t, procs)
	fromYAML := crontabRuns(t, ledger)
	assert.ElementsMatch(t, slices.Collect(maps.Keys(fromCrontab)), slices.Collect(maps.Keys(fromYAML)), "the jobs of the imported YAML are the crontab's, by name")
}

// validate and run refuse a crontab with problems, naming each problem's line; run exits 2.
func TestCrontabRefused(t *testing.T) {
	bin := buildBinary(t, t.TempDir())
	dir := t.TempDir()
	crontab := writeFile(t, dir, "crontab", "@reboot /bin/true\n0 3 * * * root /usr/sbin/logrotate\n# cronlock: nmae=x\n* * * * * true\nMAILTO=ops@example.com\n*/5 * * * * * true %%%\n@hourly true\n")
	cfg := writeFile(t, dir, "c.yaml", "nodes: [127.0.0.1:1]\ncrontab: crontab\n")
	for _, args := range [][]string{{"validate", "--config", cfg}, {"run", "--config", cfg}, {"import-crontab", crontab}} {
		code, out := runBin(t, bin, nil, args...)
		assert.Equal(t, 2, code, "%q: %s", args, out)
		out = strings.ReplaceAll(out, `\"`, `"`) // run's log quotes the error
		for _, want := range []string{
			crontab + ":1: schedule: @reboot runs a command when a host boots",
			crontab + `:2: "root" before the command is a user of this host, not a program: a user field`,
			crontab + `:3: nmae: unknown key: did you mean "name"?`,
			crontab + ":5: MAILTO: cronlock does not mail a job's output",
		} {
			assert.Contains(t, out, want, "%q", args)
		}
		assert.NotContains(t, out, crontab+":6", "%q: a line with input of %% only is valid", args)
	}

	// The crontab gets the config file's trust check.
	require.NoError(t, os.WriteFile(crontab, []byte("@hourly true\n"), 0o600))
	require.NoError(t, os.Chmod(crontab, 0o666))
	code, out := runBin(t, bin, nil, "validate", "--config", cfg)
	assert.Equal(t, 2, code, out)
	assert.Contains(t, out, crontab+": config: not safe to trust: group or others can write it (mode 0666)")
	assert.Contains(t, out, "(for development only: --insecure-config)")
	code, out = runBin(t, bin, nil, "validate", "--config", cfg, "--insecure-config")
	assert.Equal(t, 0, code, out)
}
