package scheduler_test

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/middleware"
)

// A worker frozen (SIGSTOP) past its lock's TTL right as its handler returns, with a second
// worker beside it: a run that succeeded is done — the tick runs exactly once, and is marked
// done when the worker resumes. A run that failed is retried, within Retries across both
// workers, never two at once.
func TestFrozenAfterItsRunTheTickIsNotRunAgain(t *testing.T) {
	bin := buildWorker(t)
	for _, tc := range []struct {
		name string
		fail bool
		runs int
	}{{"succeeded", false, 1}, {"failed", true, 4}} {
		t.Run(tc.name, func(t *testing.T) {
			c, ledger, nodes := processCluster(t)
			// Both workers' clocks read just past a 10-minute boundary, so that the catch-up
			// window gives both the same tick, and the next one is far.
			now := time.Now()
			offset := now.Truncate(10 * time.Minute).Add(10*time.Minute + time.Second).Sub(now)
			args := []string{"-nodes", nodes, "-ledger", ledger.Addr(), "-job", "frozen", "-spec", "@every 10m",
				"-offset", offset.String(), "-ttl", "1s", "-node-timeout", "100ms", "-catchup", "1m", "-duration", "1m",
				"-retries", "3", "-work", "10ms", "-freeze-after-run"}
			if tc.fail {
				args = append(args, "-fail")
			}
			workers := map[string]*worker{}
			for _, name := range []string{"a", "b"} {
				workers[name] = startWorker(t, bin, name, args...)
			}
			first := waitLedger(t, ledger.Client(), "ledger", "the first run", func(record) bool { return true })
			frozen := workers[first.Replica] // stopped itself as its handler returned
			tickKey := layout.TickKey(middleware.DefaultPrefix, "frozen", first.Tick)
			if !assert.Eventually(t, func() bool { return c.exists(t, tickKey) == 0 }, waitLimit, 5*time.Millisecond, "the frozen run's lock to expire") {
				// Seen once under load in CI: say which worker ran, and what each did.
				t.Logf("ledger: %+v", readLedger(t, ledger.Client(), "ledger"))
				for _, w := range workers {
					t.Logf("worker %s:\n%s", w.name, w.stop())
				}
				t.FailNow()
			}
			frozen.signal(t, syscall.SIGCONT)
			outcomes := map[string]string{}
			require.Eventually(t, func() bool {
				lines, err := ledger.Client().LRange(context.Background(), "ledger:outcomes", 0, -1).Result()
				require.NoError(t, err)
				for _, l := range lines {
					f := strings.Split(l, "|")
					outcomes[f[2]] = f[3]
				}
				return len(outcomes) == 2
			}, waitLimit, 10*time.Millisecond, "an outcome from each worker")
			for _, w := range workers {
				w.signal(t, syscall.SIGTERM)
				w.wait(t)
			}
			runs := readLedger(t, ledger.Client(), "ledger")
			slices.SortFunc(runs, func(x, y record) int { return x.Start.Compare(y.Start) })
			require.Len(t, runs, tc.runs, "runs: %+v; outcomes: %v", runs, outcomes)
			for i, r := range runs {
				assert.True(t, r.Tick.Equal(first.Tick))
				if i > 0 {
					assert.False(t, r.Start.Before(runs[i-1].End), "never two runs at once: %+v", runs)
				}
			}
			if !tc.fail {
				assert.Equal(t, outcome.Ran, outcomes[first.Replica])
				assert.True(t, c.doneOnQuorum(t, tickKey), "the tick is marked done")
			}
			if t.Failed() {
				for _, w := range workers {
					t.Logf("worker %s:\n%s", w.name, w.stderr.String())
				}
			}
		})
	}
}
