package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cronlock/cronlock/internal/lockseam"
)

// LeaseOption configures a Lease.
type LeaseOption func(*leaseConfig)

type leaseConfig struct {
	renewEvery time.Duration
	maxHold    time.Duration
	onRenew    func(lockseam.Renewal)
}

// RenewEvery sets how often the lease extends the lock. Default TTL/3. It must be shorter than
// the TTL. After a failed renewal the lease tries again sooner, after a quarter of the
// validity left, but never sooner than the node timeout (WithNodeTimeout).
func RenewEvery(d time.Duration) LeaseOption { return func(c *leaseConfig) { c.renewEvery = d } }

// MaxHold bounds how long the lease keeps the lock, from its acquisition: when it is reached,
// renewal stops and the lease is lost. Default 0, no bound.
func MaxHold(d time.Duration) LeaseOption { return func(c *leaseConfig) { c.maxHold = d } }

// onRenew calls f after every renewal attempt, in the lease's goroutine; f must not block
// (lockseam.OnRenew).
func onRenew(f func(lockseam.Renewal)) LeaseOption {
	return func(c *leaseConfig) { c.onRenew = f }
}

// Lease keeps a lock while work runs under it: a goroutine extends the lock every RenewEvery,
// and Context returns a context that is cancelled, with cause ErrLeaseLost, no later than the
// moment the lock could expire on a node — that is, before anyone else can acquire it.
//
// Its methods are safe for concurrent use. Close stops the goroutine, waits for it, and
// releases the lock.
type Lease struct {
	lock   *Lock
	cfg    leaseConfig
	ctx    *leaseContext
	cancel context.CancelCauseFunc
	capAt  time.Time // acquisition + MaxHold, zero if unbounded

	stop      chan struct{}
	exited    chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// Lease starts keeping the lock, under a context derived from ctx. The lease's context is
// cancelled when ctx is, when the lease is lost, and by Close. A lock has at most one lease:
// Lease fails with an error matching ErrLockLost when the lock was released (a closed lease
// released it) or another lease keeps it already.
func (l *Lock) Lease(ctx context.Context, opts ...LeaseOption) (*Lease, error) {
	cfg := leaseConfig{renewEvery: l.ttl / 3}
	for _, o := range opts {
		o(&cfg)
	}
	switch {
	case cfg.renewEvery <= 0:
		return nil, fmt.Errorf("redlock: RenewEvery %v: must be positive, e.g. TTL/3 (%v)", cfg.renewEvery, l.ttl/3)
	case cfg.renewEvery >= l.ttl:
		return nil, fmt.Errorf("redlock: RenewEvery %v must be shorter than the TTL %v, e.g. TTL/3 (%v)", cfg.renewEvery, l.ttl, l.ttl/3)
	case cfg.maxHold < 0:
		return nil, fmt.Errorf("redlock: MaxHold %v: must not be negative (0 means no bound)", cfg.maxHold)
	}
	if err := l.startLease(); err != nil {
		return nil, err
	}
	cctx, cancel := context.WithCancelCause(ctx)
	le := &Lease{lock: l, cfg: cfg, cancel: cancel, stop: make(chan struct{}), exited: make(chan struct{})}
	if !l.c.addLease(le) {
		cancel(ErrClientClosed)
		return nil, fmt.Errorf("redlock: lease of %s: %w", quote(l.Key()), ErrClientClosed)
	}
	if cfg.maxHold > 0 {
		le.capAt = l.acquiredAt.Add(cfg.maxHold)
	}
	le.ctx = &leaseContext{Context: cctx, lease: le, holds: WithHold(cctx, l).Value(holdsKey{})}
	go le.watch()
	return le, nil
}

// Lock returns the lock the lease keeps.
func (le *Lease) Lock() *Lock { return le.lock }

// Context returns the lease's context. Its Deadline is the lock's current validity, moved
// forward by every successful renewal; its Deadline is also never later than the parent's. Its Err reports the loss as soon as the validity is
// over, even before the lease's goroutine has noticed (e.g. right after the process was
// paused). context.Cause returns an error matching ErrLeaseLost when the lease was lost.
func (le *Lease) Context() context.Context { return le.ctx }

// Err returns nil while the lease holds, and then the cause of its end: an error matching
// ErrLeaseLost, ErrLeaseClosed or ErrClientClosed (the Client was closed), or the parent
// context's cause.
func (le *Lease) Err() error {
	if le.ctx.Err() == nil {
		return nil
	}
	return context.Cause(le.ctx)
}

// deadline is when the lease ends unless renewed: the lock's validity, or MaxHold.
func (le *Lease) deadline() time.Time {
	d := le.lock.ValidUntil()
	if !le.capAt.IsZero() && le.capAt.Before(d) {
		return le.capAt
	}
	return d
}

// expire cancels the lease's context if its deadline has passed, and reports whether it has.
func (le *Lease) expire(now time.Time) bool {
	d := le.deadline()
	if now.Before(d) {
		return false
	}
	if !le.capAt.IsZero() && !le.capAt.After(d) {
		le.cancel(fmt.Errorf("%w: max hold %v reached", ErrLeaseLost, le.cfg.maxHold))
	} else {
		le.cancel(fmt.Errorf("%w: lock %q not renewed before its validity ran out", ErrLeaseLost, le.lock.Key()))
	}
	return true
}

// watch renews the lock until Close, or until the lease is lost.
func (le *Lease) watch() {
	defer close(le.exited)
	l := le.lock
	renew := time.NewTimer(le.cfg.renewEvery)
	defer renew.Stop()
	expiry := time.NewTimer(time.Until(le.deadline()))
	defer expiry.Stop()
	attempts := 0
	for {
		select {
		case <-le.stop:
			return
		case <-expiry.C:
			if le.expire(time.Now()) {
				return
			}
			expiry.Reset(time.Until(le.deadline()))
		case <-renew.C:
			attempts++
			// An extension that answers after the validity ran out is worthless: bound it.
			ctx, cancel := context.WithDeadline(context.Background(), le.deadline())
			validity, err := l.Extend(ctx)
			cancel()
			if le.cfg.onRenew != nil {
				le.cfg.onRenew(lockseam.Renewal{Number: attempts, Validity: validity, Err: err})
			}
			switch {
			case err == nil:
				renew.Reset(le.cfg.renewEvery)
				expiry.Reset(time.Until(le.deadline()))
			case errors.Is(err, ErrLockLost):
				le.cancel(fmt.Errorf("%w: %w", ErrLeaseLost, err))
				return
			default:
				// Try again soon, while some validity is left, but no faster than a node may
				// take to answer: near the deadline, quicker attempts only add load and noise.
				renew.Reset(min(le.cfg.renewEvery, max(time.Until(le.deadline())/4, l.c.nodeTimeout(l.ttl))))
			}
			if le.expire(time.Now()) {
				return
			}
		}
	}
}

// Close stops renewing, waits for the lease's goroutine, cancels the lease's context with
// cause ErrLeaseClosed (if it was not cancelled before), and releases the lock with ctx.
// It returns the release's error. Only the first call does anything; later calls return
// the first one's result — also after Client.Close ended the lease (see there): nil if that
// released the lock.
func (le *Lease) Close(ctx context.Context) error { return le.end(ctx, ErrLeaseClosed, 0) }

// end does Close's work, cancelling the lease's context with cause and releasing the lock as
// Lock.release does with keepDone.
func (le *Lease) end(ctx context.Context, cause error, keepDone time.Duration) error {
	le.closeOnce.Do(func() {
		close(le.stop)
		<-le.exited
		le.cancel(cause)
		le.closeErr = le.lock.release(ctx, keepDone)
		le.lock.c.dropLease(le)
	})
	return le.closeErr
}

// leaseContext is the lease's context: the cancellable context it wraps, with the lock's
// validity as its deadline, and a clock check in Err.
type leaseContext struct {
	context.Context
	lease *Lease
	holds any // the parent's holds with the lease's lock in front
}

// leaseKey is the context key under which a lease's context carries the lease.
type leaseKey struct{}

// leaseFrom returns the innermost lease whose context ctx is or derives from
// (lockseam.LeaseFrom).
func leaseFrom(ctx context.Context) (*Lease, bool) {
	le, ok := ctx.Value(leaseKey{}).(*Lease)
	return le, ok
}

// Value carries the lease's hold of its lock (see WithHold), and the lease (see leaseFrom).
func (c *leaseContext) Value(key any) any {
	switch key {
	case holdsKey{}:
		return c.holds
	case leaseKey{}:
		return c.lease
	}
	return c.Context.Value(key)
}

func (c *leaseContext) Deadline() (time.Time, bool) {
	d := c.lease.deadline()
	if pd, ok := c.Context.Deadline(); ok && pd.Before(d) {
		return pd, true
	}
	return d, true
}

func (c *leaseContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	if c.lease.expire(time.Now()) {
		return c.Context.Err()
	}
	return nil
}
