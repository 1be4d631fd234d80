package redlock

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sentinel errors. Match them with errors.Is; the errors returned carry per-node detail
// (see AcquireError and NodeError).
var (
	// ErrNotAcquired means the lock is held by someone else: too many nodes refused it.
	ErrNotAcquired = errors.New("redlock: not acquired")
	// ErrQuorumUnavailable means too many nodes failed, timed out or are in quarantine for a
	// quorum to be possible, whoever holds the lock.
	ErrQuorumUnavailable = errors.New("redlock: quorum unavailable")
	// ErrLockLost means the lock is no longer ours on a quorum of nodes: it expired, or was
	// released.
	ErrLockLost = errors.New("redlock: lock lost")
	// ErrLeaseLost is the cause with which a lease's context is cancelled when the lease
	// could not be kept: renewal failed until the validity ran out, the lock was lost, or a
	// MaxHold limit was reached.
	ErrLeaseLost = errors.New("redlock: lease lost")
	// ErrLeaseClosed is the cause with which a lease's context is cancelled by Lease.Close.
	ErrLeaseClosed = errors.New("redlock: lease closed")
	// ErrClientClosed is returned by calls on a Client after Close, and by an Acquire that
	// Close woke; it is also the cause with which Close cancels the contexts of the leases it
	// ends.
	ErrClientClosed = errors.New("redlock: client closed")
	// ErrInvalidTTL matches the refusal of a lock TTL, before any node is asked.
	ErrInvalidTTL = errors.New("redlock: invalid TTL")
	// ErrInvalidKey means a key cannot be a lock's: it is one of the client's own keys (a boot
	// marker or a fence counter), refused before any node is asked, or a node found a value of
	// another kind under it (a WRONGTYPE reply). Acquire does not retry it.
	ErrInvalidKey = errors.New("redlock: invalid key")
	// ErrNotReplicated is matched by a node's error when the node did what was asked but
	// fewer of its replicas than WithWaitForReplicas asks for acknowledged it in time: the node's
	// yes does not count, since a failover to a replica that missed it would forget it.
	ErrNotReplicated = errors.New("redlock: not replicated: the node's replicas did not acknowledge it")
)

// ttlError is the refusal of a lock TTL, before any node is asked (checkTTL). It matches
// ErrInvalidTTL.
type ttlError struct {
	TTL time.Duration
	// Problem says what is wrong and how to fix it.
	Problem string
}

func (e *ttlError) Error() string { return fmt.Sprintf("redlock: TTL %v %s", e.TTL, e.Problem) }

// Is reports whether target is ErrInvalidTTL.
func (e *ttlError) Is(target error) bool { return target == ErrInvalidTTL }

// outcome is what one node answered to one request.
type outcome int

// The outcomes of a request to one node.
const (
	// outcomeOK: the node did what was asked (took, extended or released the lock).
	outcomeOK outcome = iota
	// outcomeRefused: the node answered, but the lock is held by another value there (acquire)
	// or is not ours there (extend, release).
	outcomeRefused
	// outcomeQuarantined: the node lost its memory recently and refuses locks until its
	// quarantine ends.
	outcomeQuarantined
	// outcomeError: the node did not answer in time, or answered with an error.
	outcomeError
)

func (o outcome) String() string {
	switch o {
	case outcomeOK:
		return "ok"
	case outcomeRefused:
		return "refused"
	case outcomeQuarantined:
		return "quarantined"
	case outcomeError:
		return "error"
	}
	return fmt.Sprintf("outcome(%d)", int(o))
}

// NodeError is the failure of one node in a request, with the node's index in the list given
// to New and its name.
type NodeError struct {
	Node int
	Name string
	Err  error
}

func (e *NodeError) Error() string { return fmt.Sprintf("node %d (%s): %v", e.Node, e.Name, e.Err) }

// Unwrap returns the node's error.
func (e *NodeError) Unwrap() error { return e.Err }

// Holder describes who holds a lock that was refused, as stored beside the lock on the node
// that refused it. The label and metadata are informative only: they are never used to decide
// ownership.
type Holder struct {
	// Key is the lock key that was found held (the primary key or one of the Also keys).
	Key string
	// Label is the holder's label (WithLabel), by default host and pid.
	Label string
	// Metadata is what the holder stored with the Metadata option, e.g. a trace context.
	Metadata string
	// Done reports that the holder released the lock keeping the key as a marker that the
	// guarded work was completed, as package scheduler's lock does for a tick that ran.
	Done bool
	// TTL is the time the key had left on that node.
	TTL time.Duration
	// Token is the node's fencing counter when the holder took the key there, as marking a
	// lost lock's work done reports it; zero in an AcquireError.
	Token uint64
	// value is the holder's lock value, which Acquire compares from attempt to attempt;
	// never shown.
	value string
}

// same reports whether h and o describe one hold of one key: the same key, taken by the same
// acquisition (its lock value, which a Holder never shows).
func (h Holder) same(o Holder) bool { return h.Key == o.Key && h.value == o.value }

// refusal is a node's refusal of a lock because a refuseWhile key exists on it.
type refusal struct {
	key   string // the refuseWhile key found
	value string // its value on that node
}

// AcquireError is returned when an acquisition fails. It matches ErrNotAcquired,
// ErrQuorumUnavailable or ErrInvalidKey with errors.Is, and every node's error with errors.As.
type AcquireError struct {
	// Key is the primary lock key.
	Key string
	// Reason is ErrNotAcquired, ErrQuorumUnavailable, or ErrInvalidKey when a node found a
	// value of another kind under a key of the lock.
	Reason error
	// Holder is the holder reported by the most nodes that refused (the first of them on a
	// tie), nil if none did.
	Holder *Holder
	// OK, Refused, Quarantined and Failed count the nodes' answers that had arrived when the
	// outcome was decided.
	OK, Refused, Quarantined, Failed int
	// Nodes holds the errors of the nodes that failed.
	Nodes []*NodeError
	// Detail says more where the counts do not, e.g. that the validity ran out.
	Detail string
	// refusal is the first refusal because a refuseWhile key exists, nil if no node refused
	// for that reason.
	refusal *refusal
	// own are the lock values of the acquisition's last attempts, this one included (see
	// progress.values).
	own []string
}

// leftBy reports whether h is a hold that one of the attempts of the failed acquisition e
// left behind.
func (e *AcquireError) leftBy(h Holder) bool { return slices.Contains(e.own, h.value) }

func (e *AcquireError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: key %s", e.Reason, quote(e.Key))
	if e.Holder != nil {
		state := "held"
		if e.Holder.Done {
			state = "done"
		}
		fmt.Fprintf(&b, " %s by %q", state, e.Holder.Label)
	}
	if e.refusal != nil {
		fmt.Fprintf(&b, " refused while %s exists (%s)", quote(e.refusal.key), quote(e.refusal.value))
	}
	fmt.Fprintf(&b, " (nodes: %d ok, %d refused, %d quarantined, %d failed)", e.OK, e.Refused, e.Quarantined, e.Failed)
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	for _, n := range e.Nodes {
		fmt.Fprintf(&b, "; %v", n)
	}
	return b.String()
}

// Unwrap returns the reason followed by the node errors.
func (e *AcquireError) Unwrap() []error { return reasonAndNodes(e.Reason, e.Nodes) }

// reasonAndNodes is what a failed decision's error unwraps to: its reason, then each node's
// error.
func reasonAndNodes(reason error, nodes []*NodeError) []error {
	errs := make([]error, 0, 1+len(nodes))
	errs = append(errs, reason)
	for _, n := range nodes {
		errs = append(errs, n)
	}
	return errs
}

// quorumError is returned by Extend and Release when a quorum did not confirm. It matches
// ErrLockLost (the lock is not ours on enough nodes) or ErrQuorumUnavailable (too many nodes
// failed) with errors.Is, and every node's error with errors.As.
type quorumError struct {
	Op     string // "extend", "release" or "broadcast"
	Key    string
	Reason error
	// OK, Refused and Failed count the nodes' answers that had arrived when the outcome was
	// decided.
	OK, Refused, Failed int
	Nodes               []*NodeError
}

func (e *quorumError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: %s key %s (nodes: %d ok, %d not ours, %d failed)", e.Reason, e.Op, quote(e.Key), e.OK, e.Refused, e.Failed)
	for _, n := range e.Nodes {
		fmt.Fprintf(&b, "; %v", n)
	}
	return b.String()
}

// Unwrap returns the reason followed by the node errors.
func (e *quorumError) Unwrap() []error { return reasonAndNodes(e.Reason, e.Nodes) }
