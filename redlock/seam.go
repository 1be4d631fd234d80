package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/cronlock/cronlock/internal/lockseam"
)

// The parts of the client that only cronlock's own packages use (package lockseam).
func init() {
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
	lockseam.MarkDone = func(l any, ctx context.Context, keep time.Duration) (int, any, error) {
		d, err := l.(*Lock).markDone(ctx, keep)
		return d.marked, d.newer, err
	}
}
