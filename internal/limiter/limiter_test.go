package limiter

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLimiter(t *testing.T) {
	_, err := New(0)
	require.ErrorContains(t, err, "must be positive")

	l, err := New(1)
	require.NoError(t, err)
	require.NoError(t, l.Wait(context.Background()))
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(context.DeadlineExceeded)
	assert.ErrorIs(t, l.Wait(ctx), context.DeadlineExceeded, "no slot free: the wait ends with ctx")
	l.Done()
	require.NoError(t, l.Wait(context.Background()), "a slot given back can be taken again")

	var none *Limiter
	require.NoError(t, none.Wait(ctx), "nil does not limit")
	none.Done()
}
