// Package lockseam gives cronlock's own packages the parts of package redlock that they need
// and a user of redlock does not: checking a lock TTL before any lock is taken (scheduler),
// revoking a holder, counting a key's acquisitions across the cluster and marking a lost
// lock's work done (the lock middleware). Keeping them here keeps redlock's exported API to what users call.
//
// Package redlock sets the variables in an init function, with its unexported functions.
// This package cannot import redlock (redlock imports it), so the client, holder, lock and
// option travel as any: each function takes the *redlock.Client, redlock.Holder or
// *redlock.Lock its doc names, and panics on another type — a bug in cronlock, never input.
package lockseam

import (
	"context"
	"time"
)

var (
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
)
