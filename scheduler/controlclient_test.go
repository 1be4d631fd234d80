package scheduler_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/scheduler"
)

// A Control with no jobs registered pauses, resumes, triggers and reads the history of the
// jobs that schedulers run elsewhere, over its own client.
func TestControlNeedsNoHandlers(t *testing.T) {
	c := newCluster(t, 3, false)
	led := newLedger()
	replicas(t, c, led, 2)
	ctl, err := scheduler.NewControl(c.client(t, false), scheduler.WithReplica("admin"))
	require.NoError(t, err)
	ctx := ctxT(t)

	paused := time.Now()
	require.NoError(t, ctl.Pause(ctx, "ctl", "migration"))
	st, err := ctl.Status(ctx, "ctl")
	require.NoError(t, err)
	p := st.Paused
	require.NotNil(t, p)
	assert.Equal(t, "migration", p.Reason)
	assert.Equal(t, "admin", p.By)
	checkPaused(t, led, 2, paused, "migration")

	id, err := ctl.Trigger(ctx, "ctl")
	require.NoError(t, err)
	led.waitEvent(t, "the triggered run", func(e event) bool { return e.Trigger == id })

	require.NoError(t, ctl.Resume(ctx, "ctl"))
	st, err = ctl.Status(ctx, "ctl")
	require.NoError(t, err)
	p = st.Paused
	assert.Nil(t, p)

	var history []scheduler.Record
	led.wait(t, "the triggered run in the history", func() bool {
		history, err = ctl.History(ctx, "ctl", 100)
		for _, r := range history {
			if r.Trigger == id {
				return true
			}
		}
		return false
	})
	require.NoError(t, err)

	_, err = scheduler.NewControl(nil)
	require.ErrorContains(t, err, "redlock client is nil")
}

// NewControl refuses the options that only a running Scheduler uses, naming them, instead of
// ignoring them.
func TestNewControlRefusesSchedulerOptions(t *testing.T) {
	c := newCluster(t, 3, false)
	locks := c.client(t, false)
	_, err := scheduler.NewControl(locks, scheduler.WithPrefix("p"), scheduler.WithHistorySize(5),
		scheduler.WithLocation(time.FixedZone("X", 3600)))
	require.Error(t, err)
	assert.ErrorContains(t, err, "would ignore WithLocation, WithHistorySize: drop it")
	_, err = scheduler.NewControl(locks, scheduler.WithTickRetention(time.Hour))
	assert.ErrorContains(t, err, "WithTickRetention")
	_, err = scheduler.NewControl(locks, schedseam.WithTriggerPoll(time.Minute).(scheduler.Option), schedseam.WithRescueEvery(time.Minute).(scheduler.Option),
		schedseam.WithHeartbeat(time.Minute).(scheduler.Option), schedseam.WithVersion("v9").(scheduler.Option))
	assert.ErrorContains(t, err, "would ignore schedseam.WithTriggerPoll, schedseam.WithRescueEvery, schedseam.WithHeartbeat, schedseam.WithVersion: drop it")
	_, err = scheduler.NewControl(locks, scheduler.WithPrefix("p"), scheduler.WithMaxClockSkew(2*time.Second),
		scheduler.WithClock(clocktest.NewFake(time.Now())), scheduler.WithReplica("admin"), scheduler.WithLogger(slog.Default()))
	assert.NoError(t, err)
}
