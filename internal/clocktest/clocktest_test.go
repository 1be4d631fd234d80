package clocktest_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/clocktest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFakeFiresInOrder(t *testing.T) {
	start := time.Unix(1000, 0)
	f := clocktest.NewFake(start)
	a, b := f.NewTimer(2*time.Second), f.NewTimer(time.Second)
	c := f.NewTimer(5 * time.Second)
	require.Equal(t, 3, f.Timers())
	d, ok := f.NextDeadline()
	require.True(t, ok)
	assert.Equal(t, start.Add(time.Second), d)

	f.Advance(2 * time.Second)
	assert.Equal(t, start.Add(2*time.Second), <-a.C())
	assert.Equal(t, start.Add(2*time.Second), <-b.C())
	assert.Equal(t, 1, f.Timers())
	assert.True(t, c.Stop())
	assert.False(t, c.Stop())
	assert.False(t, a.Stop(), "a fired timer does not stop")
	assert.Equal(t, 0, f.Timers())

	now := f.NewTimer(0)
	assert.Equal(t, start.Add(2*time.Second), <-now.C())
}

func TestBlockUntil(t *testing.T) {
	f := clocktest.NewFake(time.Unix(0, 0))
	done := make(chan time.Time)
	go func() {
		tm := f.NewTimer(time.Minute)
		done <- <-tm.C()
	}()
	require.NoError(t, f.BlockUntil(context.Background(), 1))
	f.Advance(time.Minute)
	assert.Equal(t, time.Unix(60, 0), <-done)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	assert.ErrorIs(t, f.BlockUntil(ctx, 5), context.Canceled)
}

func TestOffset(t *testing.T) {
	c := clocktest.Offset(time.Hour)
	assert.WithinDuration(t, time.Now().Add(time.Hour), c.Now(), time.Minute)
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
}
