//go:build unix

package main

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
)

// countLines counts the lines of the file at path that equal line.
func countLines(path, line string) int {
	data, _ := os.ReadFile(path)
	n := 0
	for l := range strings.Lines(string(data)) {
		if strings.TrimSpace(l) == line {
			n++
		}
	}
	return n
}

// echoJob is a config's job, with its opts, that appends a line, says, to the file ledger
// every second.
func echoJob(ledger, name, says, opts string) string {
	return "  - {name: " + name + ", schedule: '@every 1s', " + opts + ", command: [sh, -c, 'echo " + says + " >> \"$0\"', " + ledger + "]}\n"
}

// reloadSetup returns a temporary directory, the path of a ledger file in it, and a lock node
// out of quarantine.
func reloadSetup(t *testing.T) (dir, ledger string, node *redistest.Server) {
	dir = t.TempDir()
	node = redistest.Start(t, redistest.Config{})
	endQuarantine(t, node)
	return dir, dir + "/ledger", node
}

func TestSignals(t *testing.T) {
	bin := buildBinary(t, t.TempDir())

	t.Run("SIGHUP reloads the jobs; an invalid file is refused and the running config kept", func(t *testing.T) {
		t.Parallel()
		dir, ledger, node := reloadSetup(t)
		job := func(name, says string) string { return echoJob(ledger, name, says, "lock_ttl: 3s") }
		cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n"+job("keep", "keep-v1")+job("gone", "gone"))
		p := startProc(t, bin, "daemon", nil, "run", "--config", cfg)
		proctest.Eventually(t, "runs of both jobs", func() bool { return countLines(ledger, "keep-v1") > 0 && countLines(ledger, "gone") > 0 })

		writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n"+job("keep", "keep-v2")+job("added", "added"))
		p.signal(t, syscall.SIGHUP)
		p.waitLog(t, `msg=reloaded file=`+cfg+` jobs=2 added=1 changed=1 removed=1`)
		proctest.Eventually(t, "runs of the changed and the added job", func() bool { return countLines(ledger, "keep-v2") > 0 && countLines(ledger, "added") > 0 })
		gone, v1 := countLines(ledger, "gone"), countLines(ledger, "keep-v1")
		v2 := countLines(ledger, "keep-v2")
		proctest.Eventually(t, "two more runs of the changed job", func() bool { return countLines(ledger, "keep-v2") >= v2+2 })
		assert.Equal(t, gone, countLines(ledger, "gone"), "the removed job ran after the reload")
		assert.Equal(t, v1, countLines(ledger, "keep-v1"), "the changed job ran its old command after the reload")

		writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n"+job("keep", "keep-v3")+
			"  - {name: bad, schedule: '@every 1s', timeout: 10x, command: [x]}\n")
		p.signal(t, syscall.SIGHUP)
		p.waitLog(t, `msg="reload: config refused, the running one is kept" err="`+cfg+`:4: jobs[1].timeout: \"10x\" is not a duration`)
		v2 = countLines(ledger, "keep-v2")
		proctest.Eventually(t, "the running config to go on", func() bool { return countLines(ledger, "keep-v2") >= v2+2 })
		assert.Zero(t, countLines(ledger, "keep-v3"))

		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
	})

	t.Run("a reload with a job that cannot start changes nothing", func(t *testing.T) {
		t.Parallel()
		dir, ledger, node := reloadSetup(t)
		job := func(name, says, opts string) string { return echoJob(ledger, name, says, opts) }
		cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n"+job("keep", "keep-v1", "lock_ttl: 3s")+job("gone", "gone", "lock_ttl: 3s"))
		p := startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--kill-grace", "1s")
		proctest.Eventually(t, "runs of both jobs", func() bool { return countLines(ledger, "keep-v1") > 0 && countLines(ledger, "gone") > 0 })

		// The changed job names a variable that is not set, an added one has a lock_ttl too short
		// for --kill-grace; a job is removed, another added that would work.
		writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n"+
			job("keep", "keep-v2", "lock_ttl: 3s, env: {SECRET_env: CRONLOCK_TEST_NOT_SET}")+
			job("added", "added", "lock_ttl: 3s")+
			job("short", "short", "lock_ttl: 1200ms"))
		p.signal(t, syscall.SIGHUP)
		p.waitLog(t, `msg="reload: config refused, the running one is kept" err="`+cfg+`:3: jobs[0].env.SECRET_env: environment variable CRONLOCK_TEST_NOT_SET is not set`)
		p.waitLog(t, `msg="reload: config refused, the running one is kept" err="`+cfg+`:5: jobs[2]: --kill-grace 1s is not shorter than lock_ttl 1.2s`)
		v1, gone := countLines(ledger, "keep-v1"), countLines(ledger, "gone")
		proctest.Eventually(t, "two more runs of each running job", func() bool {
			return countLines(ledger, "keep-v1") >= v1+2 && countLines(ledger, "gone") >= gone+2
		})
		assert.Zero(t, countLines(ledger, "keep-v2"))
		assert.Zero(t, countLines(ledger, "added"))
		assert.NotContains(t, p.out.String(), "msg=reloaded")
		assert.NotContains(t, p.out.String(), "reload: job")

		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
	})

	// A run of the old definition sleeps 3s (the catch-up tick at start); the new one ticks every
	// second and forbids overlap: its ticks are skipped until the old run ended. The ledger's
	// flock sees any two runs alive at once.
	for _, tc := range []struct{ name, old, next string }{
		{"a job renamed does not overlap its old name's run", "{name: old, overlap: forbid", "{name: renamed"},
		{"a job switched from allow to forbid does not overlap its allowed run", "{name: j, overlap: allow", "{name: j, overlap: forbid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir, ledger, node := reloadSetup(t)
			command := ", command: " + ledgerJob(ledger, "sleep 3") + "}\n"
			cfg := writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n  - "+tc.old+", schedule: '@hourly', catch_up: 1h"+command)
			p := startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--log-level", "debug")
			proctest.Eventually(t, "the old definition's run", func() bool { return len(readLedger(t, ledger)) == 1 })

			writeFile(t, dir, "c.yaml", nodesConfig([]*redistest.Server{node})+"jobs:\n  - "+tc.next+", schedule: '@every 1s'"+command)
			p.signal(t, syscall.SIGHUP)
			p.waitLog(t, "msg=reloaded")
			p.waitLog(t, "outcome=skipped_overlap")
			proctest.Eventually(t, "two runs of the new definition", func() bool { return len(readLedger(t, ledger)) >= 3 })

			p.signal(t, syscall.SIGTERM)
			assert.Equal(t, 0, p.wait(t))
			readLedger(t, ledger)
		})
	}

	t.Run("a tick of a job changed by a reload before its run started does not run", func(t *testing.T) {
		t.Parallel()
		dir, ledger, node := reloadSetup(t)
		proxy := faultproxy.Start(t, node.Addr())
		proxy.RefuseNew(true) // the catch-up tick at start waits for the node
		config := func(says string) string {
			return `nodes: ["` + proxy.Addr() + `"]
jobs:
  - {name: j, schedule: '@hourly', catch_up: 1h, command: [sh, -c, 'echo ` + says + ` >> "$0"', ` + ledger + `]}
`
		}
		cfg := writeFile(t, dir, "c.yaml", config("v1"))
		p := startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--log-level", "debug")
		p.waitLog(t, `msg="cronlock: catching up a missed tick" job=j`)
		writeFile(t, dir, "c.yaml", config("v2"))
		p.signal(t, syscall.SIGHUP)
		p.waitLog(t, "msg=reloaded")
		proxy.RefuseNew(false)
		p.waitLog(t, "outcome=skipped_overlap")
		p.signal(t, syscall.SIGTERM)
		assert.Equal(t, 0, p.wait(t))
		assert.Zero(t, countLines(ledger, "v1"), "the old definition ran after the reload")
	})

	t.Run("SIGTERM while a tick waits for unavailable nodes returns at once", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		// No node answers; the catch-up tick starts at once and waits for them until its window
		// (up to the next tick, an hour away) closes; running jobs may drain for an hour. A stop
		// that waited for the tick would take an hour: stopStart is 120 times less, so that
		// a loaded machine's slow stop is not taken for one.
		cfg := writeFile(t, dir, "c.yaml", `nodes: ["127.0.0.1:1"]
jobs:
  - {name: waits, schedule: '@every 1h', catch_up: 2h, command: ["true"]}
`)
		const stopStart = 30 * time.Second
		p := startProc(t, bin, "daemon", nil, "run", "--config", cfg, "--drain", "1h")
		p.waitLog(t, `msg="cronlock: catching up a missed tick"`)
		p.waitLog(t, `msg="ready: taking ticks"`)
		p.signal(t, syscall.SIGTERM)
		start := time.Now()
		select {
		case <-p.done:
		case <-time.After(stopStart):
			require.Fail(t, "the daemon waited for the tick", p.out.String())
		}
		t.Logf("stopped in %v", time.Since(start))
		assert.Equal(t, 0, p.cmd.ProcessState.ExitCode(), p.out.String())
	})
}
