package middleware

import (
	"errors"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// The outcomes of a tick on one replica, as returned by Outcome.
const (
	OutcomeRan               = "ran"
	OutcomeFailed            = "failed"
	OutcomeSkippedHeld       = "skipped_held"
	OutcomeSkippedDone       = "skipped_done"
	OutcomeSkippedOverlap    = "skipped_overlap"
	OutcomeSkippedLate       = "skipped_late"
	OutcomeSkippedPaused     = "skipped_paused"
	OutcomeReplaced          = "replaced"
	OutcomeLeaseLost         = "lease_lost"
	OutcomeQuorumUnavailable = "quorum_unavailable"
	OutcomeStopped           = "stopped"
)

// Outcome names the outcome of a tick on one replica from the error its handler chain
// returned: OutcomeRan for nil, a skipped_* outcome for a *job.SkipError, OutcomeStopped when
// the error matches job.ErrStopped (the scheduler is stopping), OutcomeReplaced when it
// matches job.ErrReplaced (a newer tick stopped the run, Overlap Replace), OutcomeLeaseLost
// when the error matches redlock.ErrLeaseLost, OutcomeQuorumUnavailable when it matches
// redlock.ErrQuorumUnavailable, and OutcomeFailed otherwise.
func Outcome(err error) string {
	if err == nil {
		return OutcomeRan
	}
	if se, ok := errors.AsType[*job.SkipError](err); ok {
		switch se.Reason {
		case job.SkipHeld:
			return OutcomeSkippedHeld
		case job.SkipDone:
			return OutcomeSkippedDone
		case job.SkipOverlap:
			return OutcomeSkippedOverlap
		case job.SkipLate:
			return OutcomeSkippedLate
		case job.SkipPaused:
			return OutcomeSkippedPaused
		}
	}
	switch {
	case errors.Is(err, job.ErrStopped):
		return OutcomeStopped
	case errors.Is(err, job.ErrReplaced):
		return OutcomeReplaced
	case errors.Is(err, redlock.ErrLeaseLost):
		return OutcomeLeaseLost
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return OutcomeQuorumUnavailable
	}
	return OutcomeFailed
}
