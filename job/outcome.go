package job

import (
	"errors"
	"fmt"

	"github.com/cronlock/cronlock/redlock"
)

// ErrSkipped is matched (errors.Is) by every skip: the tick was not run by this replica, and
// must not be, for the reason in the *SkipError.
var ErrSkipped = errors.New("job: skipped")

// SkipReason says why a tick was skipped.
type SkipReason int

const (
	// SkipHeld: another replica holds the tick (it is running it).
	SkipHeld SkipReason = iota + 1
	// SkipDone: the tick already ran, here or elsewhere; it is kept as done.
	SkipDone
	// SkipOverlap: a previous run of the job is still running somewhere and the job's Overlap
	// is Forbid.
	SkipOverlap
	// SkipLate: the tick's window (Run.Deadline) closed before an attempt could start.
	SkipLate
)

func (r SkipReason) String() string {
	switch r {
	case SkipHeld:
		return "held by another replica"
	case SkipDone:
		return "already done"
	case SkipOverlap:
		return "previous run still running"
	case SkipLate:
		return "window closed"
	}
	return fmt.Sprintf("SkipReason(%d)", int(r))
}

// SkipError is a skip. It matches ErrSkipped, and unwraps to the lock error that caused it,
// if any.
type SkipError struct {
	Reason SkipReason
	// Holder is who holds the tick (or the previous run), as the lock nodes reported it; nil
	// when unknown.
	Holder *redlock.Holder
	// Err is the underlying error, e.g. the redlock.AcquireError.
	Err error
}

func (e *SkipError) Error() string {
	s := "job: skipped: " + e.Reason.String()
	if e.Holder != nil && e.Holder.Label != "" {
		s += fmt.Sprintf(" (%s)", e.Holder.Label)
	}
	return s
}

// Is reports whether target is ErrSkipped.
func (e *SkipError) Is(target error) bool { return target == ErrSkipped }

// Unwrap returns the underlying error.
func (e *SkipError) Unwrap() error { return e.Err }

// The outcomes of a tick on one replica, as returned by Outcome.
const (
	OutcomeRan               = "ran"
	OutcomeFailed            = "failed"
	OutcomeSkippedHeld       = "skipped_held"
	OutcomeSkippedDone       = "skipped_done"
	OutcomeSkippedOverlap    = "skipped_overlap"
	OutcomeSkippedLate       = "skipped_late"
	OutcomeLeaseLost         = "lease_lost"
	OutcomeQuorumUnavailable = "quorum_unavailable"
)

// Outcome names the outcome of a tick on one replica from the error its handler chain
// returned: OutcomeRan for nil, a skipped_* outcome for a *SkipError, OutcomeLeaseLost when
// the error matches redlock.ErrLeaseLost, OutcomeQuorumUnavailable when it matches
// redlock.ErrQuorumUnavailable, and OutcomeFailed otherwise.
func Outcome(err error) string {
	if err == nil {
		return OutcomeRan
	}
	if se, ok := errors.AsType[*SkipError](err); ok {
		switch se.Reason {
		case SkipHeld:
			return OutcomeSkippedHeld
		case SkipDone:
			return OutcomeSkippedDone
		case SkipOverlap:
			return OutcomeSkippedOverlap
		case SkipLate:
			return OutcomeSkippedLate
		}
	}
	switch {
	case errors.Is(err, redlock.ErrLeaseLost):
		return OutcomeLeaseLost
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return OutcomeQuorumUnavailable
	}
	return OutcomeFailed
}
