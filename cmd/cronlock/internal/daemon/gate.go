package daemon

import (
	"context"
	"errors"
	"sync"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// errStopping ends the ticks given up because the daemon stops.
var errStopping = errors.New("cronlock: stopping: tick given up, no run starts after 'stopping'")

// gate lets the daemon stop at once what only waits: when it closes, the ticks that wait for
// lock nodes (or for a retry) are given up, and no run starts after that; runs whose command
// started go on and drain.
type gate struct {
	mu      sync.Mutex
	closed  bool
	waiting map[*gateRun]struct{} // ticks not running a command now
}

type gateRun struct{ cancel context.CancelCauseFunc }

type gateKey struct{}

func newGate() *gate { return &gate{waiting: map[*gateRun]struct{}{}} }

// middleware gives each tick a context the gate can cancel while the tick waits. It must be
// outside middleware.Lock and middleware.Retry.
func (g *gate) middleware() middleware.Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			ctx, cancel := context.WithCancelCause(ctx)
			defer cancel(nil)
			r := &gateRun{cancel: cancel}
			g.mu.Lock()
			if g.closed {
				g.mu.Unlock()
				return errStopping
			}
			g.waiting[r] = struct{}{}
			g.mu.Unlock()
			defer func() {
				g.mu.Lock()
				delete(g.waiting, r)
				g.mu.Unlock()
			}()
			return next(context.WithValue(ctx, gateKey{}, r))
		}
	}
}

// enter is called when the tick's lock is taken, before its command starts: it reports whether
// the command may start (not once the gate closed), and then the tick is no longer waiting.
func (g *gate) enter(ctx context.Context) bool {
	r, ok := ctx.Value(gateKey{}).(*gateRun)
	if !ok {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	delete(g.waiting, r)
	return true
}

// leave is called when the command ended: the tick waits again (for a retry), or is given up
// if the gate closed meanwhile.
func (g *gate) leave(ctx context.Context) {
	r, ok := ctx.Value(gateKey{}).(*gateRun)
	if !ok {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		r.cancel(errStopping)
		return
	}
	g.waiting[r] = struct{}{}
}

// close gives up every waiting tick; no command starts after it.
func (g *gate) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	for r := range g.waiting {
		r.cancel(errStopping)
	}
}
