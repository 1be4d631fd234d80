package redlock

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/lockseam"
)

var (
	//go:embed scripts/reenter.lua
	reenterSrc    string
	reenterScript = newScript(reenterSrc)
)

// holdsKey is the context key under which a context carries the locks held by its caller.
type holdsKey struct{}

// holds is a list of locks held by a context, innermost first.
type holds struct {
	lock *Lock
	next *holds
}

// WithHold returns a copy of ctx that carries the hold of l: acquiring l's key again from
// the Client that acquired l, with this context or one derived from it, takes a nested hold
// instead of waiting for l to be released. A lease's context carries its lock's hold already.
// A nil l adds nothing: WithHold then returns ctx itself.
func WithHold(ctx context.Context, l *Lock) context.Context {
	if l == nil {
		return ctx
	}
	next, _ := ctx.Value(holdsKey{}).(*holds)
	return context.WithValue(ctx, holdsKey{}, &holds{lock: l, next: next})
}

// heldBy returns the innermost live hold of key by c that ctx carries, or nil.
func (c *Client) heldBy(ctx context.Context, key string) *Lock {
	now := time.Now()
	for h, _ := ctx.Value(holdsKey{}).(*holds); h != nil; h = h.next {
		if h.lock.c == c && h.lock.keys[0] == key && h.lock.live(now) {
			return h.lock
		}
	}
	return nil
}

// reenter takes a nested hold of outer: on a quorum of the nodes where the lock holds
// outer's value, the hold's own id joins the lock's holds. The nested hold shares outer's
// value, keys, fencing token and validity; it is released on its own, and the lock stays on a
// node while any hold is counted there. A nested hold that fails is released at once, on
// every node: each node then counts it nowhere, whichever of its two requests comes first.
func (c *Client) reenter(ctx context.Context, req *request, outer *Lock, number int) (*Lock, error) {
	start := time.Now()
	hold := any(newValue())
	t := tally{n: len(c.nodes), quorum: c.quorum}
	f := &fan{call: reenterScript.call(outer.keys, outer.valueArg, hold), parse: func(i int, cmd *redis.Cmd) reply {
		res, err := cmd.Slice()
		if err != nil {
			return reply{node: i, outcome: outcomeError, err: err}
		}
		if code, _ := res[0].(int64); code != 0 || len(res) < 2 {
			return reply{node: i, outcome: outcomeRefused}
		}
		return reply{node: i, outcome: outcomeOK}
	}}
	_, err := c.fanout(ctx, f, c.all(), c.nodeTimeout(outer.ttl), func(r reply) bool { return t.add(c, r) })
	a := lockseam.Attempt{Number: number, Quorum: c.quorum, Elapsed: time.Since(start)}
	var l *Lock
	switch {
	case err != nil:
	case t.ok < c.quorum:
		err = &AcquireError{Key: outer.keys[0], Reason: t.reason(ErrNotAcquired), Detail: "the outer hold was not found on a quorum: it is lost",
			OK: t.ok, Refused: t.refused, Failed: t.failed, Nodes: t.errs}
	default:
		l = &Lock{c: c, keys: outer.keys, releaseKeys: outer.releaseKeys, tokenArg: outer.tokenArg, group: outer.group, value: outer.value, valueArg: outer.valueArg, label: outer.label,
			ttl: outer.ttl, token: outer.token, replicas: outer.replicas, acquiredAt: start, depth: outer.depth + 1, valid: outer.valid,
			hold: hold}
		a.Validity, a.Token = time.Until(l.ValidUntil()), l.token
	}
	if l == nil {
		k := outer.releaseHold("0", hold)
		_, _ = c.fanout(context.WithoutCancel(ctx), c.releaseFan(k, outer.ttl, 0, ""), c.all(), c.nodeTimeout(outer.ttl), nil)
	}
	a.OK, a.Refused, a.Failed, a.Err = t.ok, t.refused, t.failed, err
	req.report(a)
	return l, err
}

// releasedChannel is where a node publishes that a lock was released, for WakeOnRelease: the
// lock's key and releasedSuffix, which the release script is given (boxed once) and appends.
func releasedChannel(key string) string { return key + releasedSuffix }

const releasedSuffix = ":released"

var releasedSuffixArg any = releasedSuffix

// formatMillis formats d in whole milliseconds, rounding a positive d below 1ms up to 1.
func formatMillis(d time.Duration) string {
	if d > 0 && d < time.Millisecond {
		return "1"
	}
	return strconv.FormatInt(d.Milliseconds(), 10)
}
