package daemon

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The gate is pure logic (a lock, a set, context causes), tested here without nodes or
// processes: TestSignals covers it in a real daemon, but cannot order "stopping" against a
// run's start deterministically.

// After close, no tick reaches the handler.
func TestGateClosedStartsNothing(t *testing.T) {
	g := newGate()
	g.close()
	called := false
	err := g.middleware()(func(context.Context) error { called = true; return nil })(context.Background())
	require.ErrorIs(t, err, errStopping)
	assert.False(t, called)
}

// A tick that waits (for lock nodes, for a retry) is given up when the gate closes, and its
// command may no longer start.
func TestGateGivesUpAWaitingTick(t *testing.T) {
	g := newGate()
	waiting, closed := make(chan struct{}), make(chan struct{})
	var entered bool
	done := make(chan error, 1)
	go func() {
		done <- g.middleware()(func(ctx context.Context) error {
			close(waiting) // waiting for nodes, say
			<-closed
			if ctx.Err() == nil {
				return errors.New("the waiting tick was not given up")
			}
			entered = g.enter(ctx)
			return context.Cause(ctx)
		})(context.Background())
	}()
	<-waiting
	g.close()
	close(closed)
	require.ErrorIs(t, <-done, errStopping)
	assert.False(t, entered, "a command started after the gate closed")
}

// A run whose command started is not cut by close; once its command ended, a retry would wait
// again, so leave gives the tick up.
func TestGateLetsARunningCommandDrain(t *testing.T) {
	g := newGate()
	running, closed := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- g.middleware()(func(ctx context.Context) error {
			if !g.enter(ctx) {
				return errors.New("refused before the gate closed")
			}
			close(running)
			<-closed
			if ctx.Err() != nil {
				return errors.New("the running command's context was cancelled by close")
			}
			g.leave(ctx)
			return context.Cause(ctx)
		})(context.Background())
	}()
	<-running
	g.close()
	close(closed)
	require.ErrorIs(t, <-done, errStopping)
}
