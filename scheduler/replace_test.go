package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// Replace, on three replicas: a job every 5 s whose run takes 12 s. Each new tick stops the
// run under way — its context is cancelled with a cause matching job.ErrReplaced — and starts
// once it ended: never two runs at once, and every tick runs. The lease renews every 10 s (the
// default TTL), so only the announcement can stop an old run within the 5 s window: a tick
// that ran late or was skipped would show that it did not arrive.
func TestReplaceStopsTheRunUnderWay(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	for i := range 3 {
		s := newScheduler(t, c.client(t, false), scheduler.WithReplica(fmt.Sprintf("r%d", i+1)), scheduler.WithMiddleware(led.observe()))
		require.NoError(t, s.Add(job.Job{Name: "long", Spec: "*/5 * * * * *", Options: job.Options{Overlap: job.Replace},
			Handler: led.handler(func(ctx context.Context) error { return sleepCtx(ctx, 12*time.Second) })}))
		require.NoError(t, s.Start())
	}
	const runs = 4
	led.wait(t, "3 runs replaced", func() bool {
		n := 0
		for _, o := range led.outcomes {
			if o.Outcome == outcome.Replaced {
				n++
			}
		}
		return n >= runs-1 && len(led.events) >= runs-1
	})
	outcomes, events := led.snapshot()
	for i, e := range events[:runs-1] {
		require.ErrorIs(t, e.Cause, job.ErrReplaced, "run %d (%v): its context's cause", i, e)
		if i > 0 {
			assert.True(t, e.Tick.After(events[i-1].Tick), "runs in tick order: %v", events)
			assert.False(t, e.Start.Before(events[i-1].End), "run %v started before %v ended", e, events[i-1])
			assert.Equal(t, 5*time.Second, e.Tick.Sub(events[i-1].Tick), "a tick did not run: %v", outcomes)
		}
	}
	for _, o := range outcomes {
		switch o.Outcome {
		case outcome.Replaced, outcome.SkippedHeld, outcome.SkippedDone:
		default:
			t.Errorf("outcome %v", o)
		}
	}
}
