package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// Three replicas, each with its own lock client, race for the ticks of 500 jobs due at one
// instant every two seconds, their claims queued together on the nodes' links: every tick of
// three instants runs exactly once, and no replica reports a duplicate run.
func TestBurstRunsEachTickOnce(t *testing.T) {
	const (
		jobs     = 500
		instants = 3
		period   = 2 * time.Second
	)
	c := newCluster(t, 3, false)
	led := newLedger()
	warned := &warnings{}
	var scheds []*scheduler.Scheduler
	for r := range 3 {
		name := fmt.Sprint("burst-", r)
		s := newScheduler(t, c.client(t, false, redlock.WithNodeTimeout(2*time.Second)), scheduler.WithReplica(name), scheduler.WithMiddleware(led.observe()),
			scheduler.WithLogger(slog.New(warned.handler(led.logger(name).Handler()))))
		for i := range jobs {
			require.NoError(t, s.Add(job.Job{Name: fmt.Sprint("job-", i), Spec: "*/2 * * * * *",
				Handler: led.handler(func(context.Context) error { return nil })}))
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(t, s.Start())
	}
	// The first instant a whole period after the start: every replica has every job by then.
	first := time.Now().Add(period).Truncate(period).Add(period)
	last := first.Add((instants - 1) * period)
	led.wait(t, "every job's run of the last instant", func() bool {
		n := 0
		for _, e := range led.events {
			if e.Tick.Equal(last) {
				n++
			}
		}
		return n >= jobs
	})
	for _, s := range scheds {
		require.NoError(t, s.Stop(ctxT(t)))
	}
	outcomes, events := led.snapshot()
	did := map[string][]string{}
	for _, o := range outcomes {
		id := fmt.Sprint(o.Job, " ", o.Tick.Format("15:04:05"))
		did[id] = append(did[id], fmt.Sprintf("%s: %s (%v)", o.Replica, o.Outcome, o.Err))
	}
	runs := map[string]int{}
	for _, e := range events {
		if !e.Tick.Before(first) && !e.Tick.After(last) {
			runs[fmt.Sprint(e.Job, " ", e.Tick.Format("15:04:05"))]++
		}
	}
	for i := range jobs {
		for tick := first; !tick.After(last); tick = tick.Add(period) {
			id := fmt.Sprint("job-", i, " ", tick.Format("15:04:05"))
			assert.Equal(t, 1, runs[id], "runs of %s: %v", id, did[id])
		}
	}
	assert.Empty(t, warned.list(), "duplicate runs reported")
}

// warnings keeps the "duplicate run detected" lines of schedulers' loggers.
type warnings struct {
	mu    sync.Mutex
	lines []string
}

func (w *warnings) handler(next slog.Handler) slog.Handler { return warnHandler{Handler: next, w: w} }

func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.lines...)
}

type warnHandler struct {
	slog.Handler
	w *warnings
}

func (h warnHandler) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "duplicate run detected") {
		var b strings.Builder
		b.WriteString(r.Message)
		r.Attrs(func(a slog.Attr) bool {
			fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
			return true
		})
		h.w.mu.Lock()
		h.w.lines = append(h.w.lines, b.String())
		h.w.mu.Unlock()
	}
	return h.Handler.Handle(ctx, r)
}
