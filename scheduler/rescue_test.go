package scheduler_test

import (
	"context"
	"log/slog"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// A worker killed (SIGKILL) or frozen (SIGSTOP) in the middle of a run leaves its tick in
// flight on the nodes; once its lock is gone, a live replica records the attempt as
// interrupted — once, with the worker's replica, attempt and token — and passes it through its
// middleware with outcome interrupted. The frozen worker, resumed, finds its record written:
// the history keeps the interrupted one.
func TestVanishedRunIsRecordedInterrupted(t *testing.T) {
	bin := buildWorker(t)
	for name, sig := range map[string]syscall.Signal{"killed": syscall.SIGKILL, "frozen": syscall.SIGSTOP} {
		t.Run(name, func(t *testing.T) {
			c, ledger, nodes := processCluster(t)
			now := time.Now()
			offset := now.Truncate(10 * time.Minute).Add(10*time.Minute + time.Second).Sub(now)
			a := startWorker(t, bin, "a", "-nodes", nodes, "-ledger", ledger.Addr(), "-job", "vanish", "-spec", "@every 10m",
				"-offset", offset.String(), "-ttl", "1s", "-node-timeout", "100ms", "-catchup", "1m", "-duration", "1m", "-work", "1m")
			started := waitLedger(t, ledger.Client(), "ledger:started", "a's run to start", func(r record) bool { return r.Replica == "a" })

			// The live replica never fires the job (its clock stands still); it only rescues.
			led := newLedger()
			held := &messages{msg: "cronlock: run in flight, its lock held", seen: make(chan struct{}, 100)}
			live := newScheduler(t, c.client(t, false), scheduler.WithReplica("live"), scheduler.WithClock(clocktest.NewFake(t0)),
				schedseam.WithRescueEvery(50*time.Millisecond).(scheduler.Option), scheduler.WithMiddleware(led.observe()), scheduler.WithLogger(slog.New(held)))
			require.NoError(t, live.Add(job.Job{Name: "vanish", Spec: "@every 10m", Handler: func(context.Context) error { return nil }}))
			require.NoError(t, live.Start())
			// While a renews its lease, the rescuer sees its run in flight and leaves it alone.
			for range 5 {
				select {
				case <-held.seen:
				case <-time.After(waitLimit):
					t.Fatal("the rescuer did not look at a's run in flight")
				}
			}
			outcomes, _ := led.snapshot()
			require.Empty(t, outcomes, "a run whose lease is renewed is not interrupted")
			a.signal(t, sig)

			o := led.waitOutcome(t, "the run interrupted", func(o tickOutcome) bool { return o.Outcome == outcome.Interrupted })
			assert.Equal(t, "a", o.Replica)
			assert.True(t, o.Tick.Equal(started.Tick))
			assert.ErrorIs(t, o.Err, middleware.ErrInterrupted)
			if sig == syscall.SIGSTOP {
				a.signal(t, syscall.SIGCONT)
				waitLedger(t, ledger.Client(), "ledger", "a's run to end", func(r record) bool { return r.Replica == "a" })
				a.signal(t, syscall.SIGTERM)
				a.wait(t) // its own record (lease_lost) was offered before it exited
			}
			h, err := live.Control().History(ctxT(t), "vanish", 10)
			require.NoError(t, err)
			require.Len(t, h, 1, "one record of the attempt: %+v", h)
			r := h[0]
			assert.Equal(t, outcome.Interrupted, r.Outcome)
			assert.Equal(t, "a", r.Replica)
			assert.Equal(t, 1, r.Attempt)
			assert.Equal(t, started.Token, r.Token)
			assert.True(t, r.Tick.Equal(started.Tick))
			assert.Contains(t, r.Error, "replica a (pid ")
			assert.Contains(t, r.Error, "found by live")
			require.NoError(t, live.Stop(ctxT(t)))
			interrupted := 0
			for _, o := range led.outcomes {
				if o.Outcome == outcome.Interrupted {
					interrupted++
				}
			}
			assert.Equal(t, 1, interrupted, "counted once")
		})
	}
}

// messages is a slog handler that signals each record with the message msg.
type messages struct {
	msg  string
	seen chan struct{}
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) WithAttrs([]slog.Attr) slog.Handler       { return m }
func (m *messages) WithGroup(string) slog.Handler            { return m }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	if r.Message == m.msg {
		select {
		case m.seen <- struct{}{}:
		default:
		}
	}
	return nil
}
