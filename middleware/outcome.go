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
	OutcomeInterrupted       = "interrupted"
)

// ErrInterrupted is the error of a run whose holder vanished — its process killed, or frozen
// past its lease — without recording how it ended: a live replica found its in-flight record
// with its lock gone from a quorum of the nodes, and ended it (scheduler.Record outcome
// interrupted). Outcome names it OutcomeInterrupted.
var ErrInterrupted = errors.New("middleware: interrupted: the run's holder vanished without recording its end")

// Outcome names the outcome of a tick on one replica from the error its handler chain
// returned: OutcomeRan for nil, a skipped_* outcome for a *job.SkipError, OutcomeStopped when
// the error matches job.ErrStopped (the scheduler is stopping), OutcomeReplaced when it
// matches job.ErrReplaced (a newer tick stopped the run, Overlap Replace), OutcomeLeaseLost
// when the error matches redlock.ErrLeaseLost, OutcomeInterrupted when it matches
// ErrInterrupted, OutcomeQuorumUnavailable when it matches
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
	case errors.Is(err, ErrInterrupted):
		return OutcomeInterrupted
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
