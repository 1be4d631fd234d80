package redlock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Lock is a lock held on a quorum of nodes. Its methods are safe for concurrent use.
type Lock struct {
	c    *Client
	keys []string // keys[0] is the primary key
	// releaseKeys are keys and then the fence counter, which the release raises to tokenArg
	// (see release.lua).
	releaseKeys []string
	tokenArg    any    // the token: the release script's ARGV[4]
	group       string // primaryGroup of the primary key
	value       string
	valueArg    any // value, boxed once
	label       string
	ttl         time.Duration
	token       uint64
	// acquisitions is the acquisition's number with countAcquisitions; 0 without.
	acquisitions uint64
	late         *lateOKs // the acquisition's replies still to come; nil for a nested hold
	replicas     []int    // by node (nil: none), WithWaitForReplicas
	// acquiredAt is when the successful attempt started.
	acquiredAt time.Time
	// depth is 0 for a lock, n for the n-th nested hold of it (see Acquire).
	depth int
	// hold is a nested hold's id among the lock's holds on the nodes (see reenter); nil for a
	// lock.
	hold any
	// valid is shared by a lock and its nested holds.
	valid *validity

	mu       sync.Mutex
	released bool
	leased   bool
	keep     string // what Release kept as a done marker, in milliseconds
}

// validity is the instant until which a lock is certainly held.
type validity struct {
	mu    sync.Mutex
	until time.Time
}

func (v *validity) get() time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.until
}

// raise moves the validity forward, never back.
func (v *validity) raise(t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if t.After(v.until) {
		v.until = t
	}
}

// Key returns the lock's primary key.
func (l *Lock) Key() string { return l.keys[0] }

// Value returns the lock's random value, which identifies this holder on the nodes.
func (l *Lock) Value() string { return l.value }

// Token returns the lock's fencing token: strictly greater than the token of every
// acquisition from the same fence key that had returned before this one started, such as
// every earlier holder of the same key. Overlapping acquisitions sharing the fence key may get
// equal tokens, or the later a lower one (see the package documentation).
func (l *Lock) Token() uint64 { return l.token }

// ValidUntil returns the instant until which the lock is certainly held, on this host's
// monotonic clock: acquisition (or last extension) start + TTL − drift allowance.
func (l *Lock) ValidUntil() time.Time { return l.valid.get() }

// live reports whether the lock is held as far as this process knows: not released, and
// within its validity.
func (l *Lock) live(now time.Time) bool {
	return !l.isReleased() && now.Before(l.valid.get())
}

// isReleased reports whether Release was called.
func (l *Lock) isReleased() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.released
}

// markReleased records a release keeping keep milliseconds of done marker, and reports
// whether the lock was released before (then nothing is recorded).
func (l *Lock) markReleased(keep string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return true
	}
	l.released, l.keep = true, keep
	return false
}

// startLease records that a lease keeps the lock, or fails with ErrLockLost when the lock was
// released or another lease keeps it already.
func (l *Lock) startLease() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.released:
		return fmt.Errorf("%w: lease of lock %s: the lock was released; acquire it again", ErrLockLost, quote(l.keys[0]))
	case l.leased:
		return fmt.Errorf("%w: lease of lock %s: another lease keeps the lock already; use that lease's context", ErrLockLost, quote(l.keys[0]))
	}
	l.leased = true
	return nil
}

// newValue returns 128 random bits, hex-encoded.
func newValue() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	var h [32]byte
	hex.Encode(h[:], b[:])
	return string(h[:])
}

// Extend renews the lock on the nodes for its TTL again, and returns its new validity. It
// succeeds only when a quorum of nodes still holds the lock for us: otherwise the error
// matches ErrLockLost (not ours on too many nodes) or ErrQuorumUnavailable (too many nodes
// failed), and the validity is unchanged. It fails with an error matching ErrLockLost as soon
// as one node answers that the lock was revoked (cronlock's scheduler revokes the run it
// replaces, Overlap Replace), even when a quorum extended it.
func (l *Lock) Extend(ctx context.Context) (time.Duration, error) {
	c := l.c
	if l.isReleased() {
		return 0, &quorumError{Op: "extend", Key: l.keys[0], Reason: ErrLockLost}
	}
	start := time.Now()
	t := tally{n: len(c.nodes), quorum: c.quorum}
	f := &fan{call: extendScript.call(l.keys, l.valueArg, c.ttlArg(l.ttl)), replicas: l.replicas, parse: judgeCmd}
	_, err := c.fanout(ctx, f, c.all(), c.nodeTimeout(l.ttl), func(r reply) bool { return t.add(c, r) })
	if err != nil {
		return 0, err
	}
	if t.revoked > 0 {
		return 0, withContext(ctx, &quorumError{Op: "extend", Key: l.keys[0], Reason: errRevoked,
			OK: t.ok, Refused: t.refused, Failed: t.failed, Nodes: t.errs})
	}
	if t.ok < c.quorum {
		// Lost only when too many nodes said "not ours" for the lock to be on a quorum; a node
		// without it (a late yes that was released, a restart) beside nodes that did not
		// answer leaves it maybe ours: unavailable, so that a lease tries again while its
		// validity lasts.
		reason := ErrQuorumUnavailable
		if t.refused > t.n-t.quorum {
			reason = ErrLockLost
		}
		return 0, withContext(ctx, &quorumError{Op: "extend", Key: l.keys[0], Reason: reason,
			OK: t.ok, Refused: t.refused, Failed: t.failed, Nodes: t.errs})
	}
	validUntil := start.Add(l.ttl - c.drift(l.ttl))
	validity := time.Until(validUntil)
	if validity <= 0 {
		return 0, &quorumError{Op: "extend", Key: l.keys[0], Reason: ErrQuorumUnavailable, OK: t.ok}
	}
	l.valid.raise(validUntil)
	return validity, nil
}

// judgeCmd turns a node's reply, a count of keys acted on, into a reply.
func judgeCmd(node int, cmd *redis.Cmd) reply {
	n, err := cmd.Int64()
	return judge(node, n, err)
}

// judge turns a node's count of keys acted on into a reply; -1 is extend.lua's refusal of a
// revoked lock. A key that holds a value of another kind (WRONGTYPE) is not our lock there.
func judge(node int, n int64, err error) reply {
	switch {
	case isWrongType(err):
		return reply{node: node, outcome: outcomeRefused}
	case err != nil:
		return reply{node: node, outcome: outcomeError, err: err}
	case n < 0:
		return reply{node: node, outcome: outcomeRefused, revoked: true}
	case n == 0:
		return reply{node: node, outcome: outcomeRefused}
	}
	return reply{node: node, outcome: outcomeOK}
}

// releaseCall returns the call that releases this hold of the lock, keeping keep milliseconds
// of done marker.
func (l *Lock) releaseCall(keep string) *call { return l.releaseHold(keep, l.hold) }

// releaseHold returns the call that releases the lock's hold hold (nil: the outer hold),
// keeping keep milliseconds of done marker.
func (l *Lock) releaseHold(keep string, hold any) *call {
	if hold == nil {
		return releaseScript.call(l.releaseKeys, l.valueArg, keep, releasedSuffixArg, l.tokenArg)
	}
	return releaseScript.call(l.releaseKeys, l.valueArg, keep, releasedSuffixArg, l.tokenArg, hold)
}

// unfencedRelease returns the call that releases the keys of a failed attempt, which has no
// token to raise the fence counter to.
func unfencedRelease(keys []string, value any) *call {
	return releaseScript.call(keys, value, "0", releasedSuffixArg, "0")
}

// Release releases the lock on every node, in parallel, and returns once a quorum confirmed
// (or too many nodes failed for one to): it never waits for the slowest nodes. Their requests
// go on; a release that fails or times out on a node is retried in the background until the
// lock has expired there (Client.Close stops that). Until the lock's primary node confirmed,
// this Client's contended acquisitions of the lock's group ask every node at once instead of
// the primary first (see contentionWindow); other clients may find the lock still held on
// the slow nodes for a moment, as with any release.
// It fails with an error matching ErrLockLost when the lock was not ours anymore on too many
// nodes (it had expired, or was released before), or ErrQuorumUnavailable when too many nodes
// failed; the lock then expires by its TTL. Release the lock only after the guarded work
// returned. The nodes' requests are not cut short when ctx is cancelled (each is bounded by
// the node timeout): a release cut short would leave the lock on a node until its TTL.
func (l *Lock) Release(ctx context.Context) error { return l.release(ctx, 0) }

// release does Release's work, keeping the primary key for keepDone after it, marked done,
// instead of deleting it when keepDone is positive: until it expires, acquisitions are refused
// with a Holder whose Done is true. The other keys are released. cronlock's lock middleware
// records a completed tick so (package lockseam).
func (l *Lock) release(ctx context.Context, keepDone time.Duration) error {
	if keepDone < 0 {
		return fmt.Errorf("redlock: release keeping the done marker for %v: must not be negative", keepDone)
	}
	c := l.c
	keep := formatMillis(keepDone)
	if l.markReleased(keep) {
		return &quorumError{Op: "release", Key: l.keys[0], Reason: ErrLockLost}
	}
	t := tally{n: len(c.nodes), quorum: c.quorum}
	primary, last, group := c.primary(l.group), l.depth == 0, ""
	if last {
		group = l.group
		c.unreleased.add(group, 1)
	}
	f := c.releaseFan(l.releaseCall(keep), l.ttl, primary, group)
	if inFlight := l.late.release(); inFlight != 0 {
		// A node whose acquisition is still in flight may get this release first (see lateOKs).
		parse := f.parse
		f.parse = func(node int, cmd *redis.Cmd) reply {
			r := parse(node, cmd)
			if nodeBit(node)&inFlight != 0 {
				n, err := cmd.Int64()
				if l.late.released(node, n, err) {
					c.releaseNodes(ctx, []int{node}, l.releaseCall(keep), l.ttl, primary, l.group)
				}
			}
			return r
		}
	}
	// The nodes' requests outlive a cancelled ctx (each is bounded by the node timeout): a
	// release cut short would leave the lock there until its TTL.
	_, err := c.fanout(context.WithoutCancel(ctx), f, c.all(), c.nodeTimeout(l.ttl), func(r reply) bool { return t.add(c, r) })
	if err != nil {
		return err
	}
	if t.ok < c.quorum {
		return withContext(ctx, &quorumError{Op: "release", Key: l.keys[0], Reason: t.reason(ErrLockLost),
			OK: t.ok, Refused: t.refused, Failed: t.failed, Nodes: t.errs})
	}
	return nil
}
