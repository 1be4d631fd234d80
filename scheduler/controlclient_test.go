package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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
	p, err := ctl.Paused(ctx, "ctl")
	require.NoError(t, err)
	require.NotNil(t, p)
	assert.Equal(t, "migration", p.Reason)
	assert.Equal(t, "admin", p.By)
	checkPaused(t, led, 2, paused, "migration")

	id, err := ctl.Trigger(ctx, "ctl")
	require.NoError(t, err)
	led.waitEvent(t, "the triggered run", func(e event) bool { return e.Trigger == id })

	require.NoError(t, ctl.Resume(ctx, "ctl"))
	p, err = ctl.Paused(ctx, "ctl")
	require.NoError(t, err)
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
