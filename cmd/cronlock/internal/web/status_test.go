package web

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
)

// The outcome a replica records for a tick another replica ran names the runner.
func TestJobStatusRecordsSkips(t *testing.T) {
	st := NewJobStatus()
	tick := time.Now().Truncate(time.Second)
	h := st.Middleware("me")(func(ctx context.Context) error {
		return fmt.Errorf("wrapped: %w", &job.SkipError{Reason: job.SkipDone, Holder: "other"})
	})
	ctx := job.NewContext(context.Background(), &job.Run{Job: "j", Tick: tick})
	require.Error(t, h(ctx))
	st.mu.Lock()
	last := *st.last["j"]
	st.mu.Unlock()
	assert.Equal(t, outcome.SkippedDone, last.Outcome)
	assert.Equal(t, "other", last.Runner)
	assert.Zero(t, last.Token)

	// An older tick that finishes later does not replace the newer one.
	old := job.NewContext(context.Background(), &job.Run{Job: "j", Tick: tick.Add(-time.Second)})
	require.NoError(t, st.Middleware("me")(func(ctx context.Context) error { Started(ctx, 7); return nil })(old))
	st.mu.Lock()
	assert.Equal(t, tick, st.last["j"].Tick)
	st.mu.Unlock()
}
