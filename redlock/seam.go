package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/redis/go-redis/v9"
)

// The parts of the client that only cronlock's own packages use (package lockseam).
func init() {
	lockseam.ErrRevoked = errRevoked
	lockseam.OnAttempt = func(f func(lockseam.Attempt)) any { return onAttempt(f) }
	lockseam.OnRenew = func(f func(lockseam.Renewal)) any { return onRenew(f) }
	lockseam.Quorum = func(c any) int { return c.(*Client).quorum }
	lockseam.NodeTimeout = func(c any, ttl time.Duration) time.Duration { return c.(*Client).nodeTimeout(ttl) }
	lockseam.LeaseFrom = func(ctx context.Context) (any, bool) { return leaseFrom(ctx) }
	lockseam.LeaseDeadline = func(le any) time.Time { return le.(*Lease).deadline() }
	lockseam.CheckTTL = func(c any, ttl time.Duration) error { return c.(*Client).checkTTL(ttl) }
	lockseam.Revoke = func(c any, ctx context.Context, h any, channel, message string) (int, error) {
		return c.(*Client).revoke(ctx, h.(Holder), channel, message)
	}
	lockseam.SameHold = func(a, b any) bool { return a.(Holder).same(b.(Holder)) }
	lockseam.LeftBy = func(h any, err error) bool {
		ae, ok := errors.AsType[*AcquireError](err)
		return ok && ae.leftBy(h.(Holder))
	}
	lockseam.CountAcquisitions = func(key string, ttl time.Duration) any { return countAcquisitions(key, ttl) }
	lockseam.Acquisitions = func(l any) uint64 { return l.(*Lock).acquisitions }
	lockseam.Broadcast = func(c any, ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
		return c.(*Client).broadcast(ctx, script, keys, args...)
	}
	lockseam.ClusterNodes = func(c any) bool { return c.(*Client).cfg.cluster }
	lockseam.Subscribe = func(c any, ctx context.Context, channel string) lockseam.Notifications {
		return c.(*Client).subscribeChannel(ctx, channel)
	}
	lockseam.RefuseWhile = func(key string) any { return refuseWhile(key) }
	lockseam.Refusal = func(err error) (string, bool) {
		ae, ok := errors.AsType[*AcquireError](err)
		if !ok || ae.refusal == nil {
			return "", false
		}
		return ae.refusal.value, true
	}
	lockseam.ResolveSplits = func(n int) any { return resolveSplits(n) }
	lockseam.StartBefore = func(t time.Time) any { return startBefore(t) }
	lockseam.AskEveryNode = func() any { return askEveryNode() }
	lockseam.ReleaseKeepingDone = func(l any, ctx context.Context, keep time.Duration) error {
		return l.(*Lock).release(ctx, keep)
	}
	lockseam.CloseKeepingDone = func(le any, ctx context.Context, keep time.Duration) error {
		return le.(*Lease).end(ctx, ErrLeaseClosed, keep)
	}
	lockseam.MarkDone = func(l any, ctx context.Context, keep time.Duration) (int, any, error) {
		d, err := l.(*Lock).markDone(ctx, keep)
		return d.marked, d.newer, err
	}
}
