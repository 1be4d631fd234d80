// Package lockseam gives cronlock's own packages the parts of package redlock that they need
// and a user of redlock does not: checking a lock TTL before any lock is taken, the client's
// quorum, and keeping state beside the locks — scripts run on every node, whether those are
// Redis Clusters, Pub/Sub wake-ups — (scheduler); the acquisition options that shape a cron tick's lock, the hooks that observe
// each attempt and renewal, the node timeout, revoking a holder, counting a key's
// acquisitions across the cluster and keeping or marking a tick's done marker (the lock
// middleware); the lease under a run's context and its deadline (scheduler, the daemon's
// command supervisor). Keeping them here keeps redlock's exported API to what users call.
//
// Package redlock sets the variables in an init function, with its unexported functions.
// This package cannot import redlock (redlock imports it), so the client, holder, lock, lease
// and option travel as any: each function takes the *redlock.Client, redlock.Holder,
// *redlock.Lock or *redlock.Lease its doc names, and panics on another type — a bug in
// cronlock, never input. An option comes back as any holding a redlock.AcquireOption.
package lockseam

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultMaxTTL is the default of redlock.WithMaxTTL, the longest lock TTL a client takes and
// a restarted node's quarantine: the daemon's max_ttl defaults to it too, since the clients of
// one set of nodes must agree on it.
const DefaultMaxTTL = time.Minute

// ErrRevoked matches the error of an Extend refused because the lock was revoked (Revoke), and
// so the cause of a lease lost that way. It matches redlock.ErrLockLost too. redlock sets it.
var ErrRevoked error

// Attempt describes one attempt of an acquisition, for observability (OnAttempt).
type Attempt struct {
	// Number counts the attempts of one Acquire call, from 1.
	Number int
	// PrimaryFirst reports that the lock was contended, so the primary node was asked alone
	// first (unless AskEveryNode).
	PrimaryFirst bool
	// OK, Refused, Quarantined and Failed count the nodes' answers that had arrived when the
	// outcome was decided; Quorum is the number of OKs needed.
	OK, Refused, Quarantined, Failed, Quorum int
	// Elapsed is the attempt's duration.
	Elapsed time.Duration
	// Validity is how long the lock is certainly held, from the end of the attempt; zero on
	// failure.
	Validity time.Duration
	// Token is the fencing token; zero on failure.
	Token uint64
	// Err is the attempt's error, nil on success.
	Err error
}

// Renewal describes one renewal attempt of a lease, for observability (OnRenew).
type Renewal struct {
	// Number counts the lease's renewal attempts, from 1.
	Number int
	// Validity is the lock's validity after a successful renewal.
	Validity time.Duration
	// Err is the renewal's error, nil on success.
	Err error
}

// Notifications is a subscription made with Subscribe: C receives a value after one or more
// messages (coalesced, and a message may be lost, so a caller also looks on its own now and
// then), until Close ends the subscriptions and waits for their goroutines. A nil
// Notifications (no node could be subscribed to) is never returned: Subscribe returns one
// whose C is nil.
type Notifications interface {
	C() <-chan struct{}
	Close()
}

var (
	// OnAttempt is the acquisition option that calls f after every attempt of the
	// acquisition, successful or not, in the goroutine that called Acquire or TryAcquire.
	OnAttempt func(f func(Attempt)) any

	// OnRenew is the redlock.LeaseOption that calls f after every renewal attempt of the
	// lease, in the lease's goroutine; f must not block.
	OnRenew func(f func(Renewal)) any

	// Quorum returns how many nodes of the *redlock.Client must agree.
	Quorum func(client any) int

	// NodeTimeout returns how long one request to one node of the *redlock.Client may take for
	// a lock of the given TTL: redlock.WithNodeTimeout's value, or by default TTL/50 and at
	// least 5ms.
	NodeTimeout func(client any, ttl time.Duration) time.Duration

	// LeaseFrom returns the innermost *redlock.Lease whose context ctx is or derives from.
	LeaseFrom func(ctx context.Context) (lease any, ok bool)

	// LeaseDeadline returns when the *redlock.Lease ends unless renewed: its lock's validity
	// (moved forward by every successful renewal), or redlock.MaxHold if sooner. Unlike the
	// Deadline of a context derived from the lease's, it is not shortened by a timeout of
	// that context.
	LeaseDeadline func(lease any) time.Time

	// CheckTTL reports whether the *redlock.Client accepts ttl for a lock, as an error
	// matching redlock.ErrInvalidTTL (that says what to give instead) or nil, without any I/O.
	CheckTTL func(client any, ttl time.Duration) error

	// Revoke asks the holder of a lock (the redlock.Holder of an AcquireError) to give it up:
	// its key is marked on every node that holds it for that holder, so that its next Extend
	// there fails with redlock.ErrRevoked, and, when channel is not "", message is published
	// on channel on each node that marked it. It returns how many nodes marked the lock, and
	// an error matching redlock.ErrQuorumUnavailable when fewer than a quorum answered.
	Revoke func(client any, ctx context.Context, holder any, channel, message string) (int, error)

	// SameHold reports whether two redlock.Holders describe one hold of one key: the same
	// key, taken by the same acquisition.
	SameHold func(a, b any) bool

	// LeftBy reports whether the redlock.Holder is a hold that one of the last attempts of
	// the failed acquisition err (an error holding a *redlock.AcquireError) left behind: a
	// leftover of the caller's own attempt, whose release had not reached that node yet.
	LeftBy func(holder any, err error) bool

	// CountAcquisitions returns the redlock.AcquireOption that counts the successful
	// acquisitions made with it under key, across every client, keeping the count on the
	// nodes for ttl after each; Acquisitions reads the count from the *redlock.Lock.
	CountAcquisitions func(key string, ttl time.Duration) any

	// Acquisitions returns the number of acquisitions counted under the CountAcquisitions key
	// the *redlock.Lock was acquired with, this one included; 0 without that option.
	Acquisitions func(lock any) uint64

	// MarkDone keeps the *redlock.Lock's primary key as a done marker for keep on every node
	// where no other holder took it, and releases its other keys where they are its own: for
	// work that completed after the lock may have been lost. It returns the number of nodes
	// that keep the marker and, as a []redlock.Holder, the holders found with a fencing token
	// above the lock's (each took the key while the work was going on: it ran twice). It
	// fails with an error matching redlock.ErrLockLost when other holders keep the marker off
	// a quorum, or redlock.ErrQuorumUnavailable; the lock counts as released afterwards.
	MarkDone func(lock any, ctx context.Context, keep time.Duration) (marked int, newer any, err error)

	// Broadcast runs script on every node of the *redlock.Client in parallel and waits for
	// every reply, each request bounded by max(NodeTimeout(MaxTTL), 1s): for state kept beside
	// the locks, written to a quorum and read merged from the nodes that answer. It returns
	// each node's reply, indexed like the client's nodes (nil where a node failed), and, when
	// fewer than a quorum answered, also an error matching redlock.ErrQuorumUnavailable.
	Broadcast func(client any, ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error)

	// ClusterNodes reports whether the *redlock.Client lays its keys out for nodes that are
	// Redis Clusters (a *redis.ClusterClient node, or redlock.WithClusterNodes): a script that
	// Broadcast sends there may only touch keys of one hash slot.
	ClusterNodes func(client any) bool

	// Subscribe listens on channel on every node of the *redlock.Client that can subscribe,
	// for messages published there (by a Broadcast script) as hints that shared state
	// changed. It returns once every node confirmed or failed, each within
	// max(NodeTimeout(MaxTTL), 1s), or when ctx ends; the subscriptions last until Close.
	Subscribe func(client any, ctx context.Context, channel string) Notifications

	// RefuseWhile is the acquisition option that makes every node refuse the lock while key
	// exists there (a string key): the failed acquisition's error then matches
	// redlock.ErrNotAcquired, and Refusal reports key's value. Written to a quorum, key refuses
	// every acquisition until it is deleted from enough nodes, at no extra round trip; such a
	// refusal is final for TryAcquire. Where a node is a Redis Cluster, key must share the
	// primary key's hash tag. A nested hold does not look at it.
	RefuseWhile func(key string) any

	// Refusal reports the value of the RefuseWhile key found by the first node that refused
	// the failed acquisition err for that reason, and whether one did.
	Refusal func(err error) (value string, ok bool)

	// ResolveSplits is the acquisition option that makes TryAcquire try again, up to n times,
	// after a refusal that may have left the lock to no one (racers that ask every node at
	// once split the vote). Before each new attempt it waits for the failed attempts to be
	// released plus a step of the client's backoff; by then the key is known contended, so
	// the primary node is asked first, which settles the race.
	ResolveSplits func(n int) any

	// StartBefore is the acquisition option that bounds the acquisition like a context
	// deadline that cuts no request: no attempt starts at or after t. An acquisition called at
	// or after t fails at once with an error matching context.DeadlineExceeded.
	StartBefore func(t time.Time) any

	// AskEveryNode is the acquisition option that makes each attempt ask every node in
	// parallel even while the lock is contended, to look past a lock left on the primary node
	// alone by a release that missed it.
	AskEveryNode func() any

	// ReleaseKeepingDone releases the *redlock.Lock as Lock.Release does, but keeps its primary
	// key for keep afterwards, marked done, instead of deleting it: until it expires,
	// acquisitions are refused with a Holder whose Done is true. The other keys are released.
	ReleaseKeepingDone func(lock any, ctx context.Context, keep time.Duration) error

	// CloseKeepingDone closes the *redlock.Lease as Lease.Close does, releasing its lock as
	// ReleaseKeepingDone does.
	CloseKeepingDone func(lease any, ctx context.Context, keep time.Duration) error
)
