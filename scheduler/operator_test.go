package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// The operator named in the context is recorded by a pause, a manual run and a backfill —
// seen by the handler (job.Run.By) and in the history (Record.By) — and without one, the
// replica that was asked is; a bad name is refused before anything is written.
func TestOperatorIsRecorded(t *testing.T) {
	c := newCluster(t, 3, false)
	ctx := ctxT(t)
	byRun := make(chan string, 10)
	s := newScheduler(t, c.client(t, false), scheduler.WithReplica("r1"), scheduler.WithTickRetention(5*time.Minute))
	require.NoError(t, s.Add(job.Job{Name: "ops", Spec: "@every 1m", Handler: func(ctx context.Context) error {
		if r, _ := job.RunFrom(ctx); r.Trigger != "" || r.Backfill {
			byRun <- r.By
		}
		return nil
	}}))
	require.NoError(t, s.Start())
	ctl, err := scheduler.NewControl(c.client(t, false), scheduler.WithReplica("admin-7"))
	require.NoError(t, err)

	alice := scheduler.WithOperator(ctx, "Alice Smith")
	require.NoError(t, s.Control().Pause(alice, "ops", "migration"))
	st, err := ctl.Status(ctx, "ops")
	require.NoError(t, err)
	p := st.Paused
	require.NotNil(t, p)
	assert.Equal(t, "Alice Smith", p.By)
	require.NoError(t, ctl.Pause(ctx, "ops", "again"))
	st, err = ctl.Status(ctx, "ops")
	require.NoError(t, err)
	p = st.Paused
	assert.Equal(t, "admin-7", p.By, "no operator: the control's replica")
	require.NoError(t, ctl.Resume(scheduler.WithOperator(ctx, "bob"), "ops"))

	id, err := ctl.Trigger(scheduler.WithOperator(ctx, "bob"), "ops")
	require.NoError(t, err)
	assert.Equal(t, "bob", <-byRun)
	_, err = s.Control().Trigger(ctx, "ops")
	require.NoError(t, err)
	assert.Equal(t, "r1", <-byRun, "no operator: the replica asked")

	to := time.Now().Truncate(time.Minute).Add(-time.Minute)
	sum, err := s.Backfill(scheduler.WithOperator(ctx, "carol"), "ops", to, to, scheduler.BackfillOptions{})
	require.NoError(t, err)
	assert.Equal(t, 1, sum.Ran)
	assert.Equal(t, "carol", <-byRun)

	by := map[string]string{}
	require.Eventually(t, func() bool { // the records are written after the handlers return
		h, err := s.Control().History(ctx, "ops", 10)
		clear(by)
		for _, r := range h {
			if r.Outcome == outcome.Ran && (r.Backfill || r.Trigger != "") {
				by[recordKind(r, id)] = r.By
			}
		}
		return err == nil && len(by) == 3
	}, waitLimit, 10*time.Millisecond)
	assert.Equal(t, map[string]string{"backfill": "carol", "trigger": "bob", "trigger without operator": "r1"}, by)

	for _, bad := range []string{"", "   ", "a\nb", "tab\there", strings.Repeat("x", 65), "\xff"} {
		bctx := scheduler.WithOperator(ctx, bad)
		err := s.Control().Pause(bctx, "ops", "x")
		require.Error(t, err, "%q", bad)
		assert.Contains(t, err.Error(), "operator name", "%q", bad)
		_, err = ctl.Trigger(bctx, "ops")
		assert.ErrorContains(t, err, "operator name", "%q", bad)
		_, err = s.Backfill(bctx, "ops", to, to, scheduler.BackfillOptions{})
		assert.ErrorContains(t, err, "operator name", "%q", bad)
		assert.ErrorContains(t, ctl.Resume(bctx, "ops"), "operator name", "%q", bad)
	}
	st, err = ctl.Status(ctx, "ops")
	require.NoError(t, err)
	p = st.Paused
	assert.Nil(t, p, "a refused pause writes nothing")
	assert.NoError(t, schedseam.CheckOperator("émile@host-1.example"))
}

// recordKind tells the records of TestOperatorIsRecorded apart; id is the trigger bob asked.
func recordKind(r scheduler.Record, id string) string {
	switch {
	case r.Backfill:
		return "backfill"
	case r.Trigger == id:
		return "trigger"
	}
	return "trigger without operator"
}
