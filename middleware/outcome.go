package middleware

import (
	"errors"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// ErrInterrupted is the error of a run whose holder vanished — its process killed, or frozen
// past its lease — without recording how it ended: a live replica found its in-flight record
// with its lock gone from a quorum of the nodes, and ended it (scheduler.Record outcome
// interrupted). Outcome names it "interrupted".
var ErrInterrupted = errors.New("middleware: interrupted: the run's holder vanished without recording its end")

// Outcome names the outcome of a tick on one replica from the error its handler chain
// returned: the first of these that applies.
//
//	"ran"                 err is nil
//	"skipped_held"        a *job.SkipError with reason job.SkipHeld
//	"skipped_done"        a *job.SkipError with reason job.SkipDone
//	"skipped_overlap"     a *job.SkipError with reason job.SkipOverlap
//	"skipped_late"        a *job.SkipError with reason job.SkipLate
//	"skipped_paused"      a *job.SkipError with reason job.SkipPaused
//	"interrupted"         err matches ErrInterrupted
//	"stopped"             err matches job.ErrStopped (the scheduler is stopping)
//	"replaced"            err matches job.ErrReplaced (a newer tick stopped the run: Replace)
//	"lease_lost"          err matches redlock.ErrLeaseLost
//	"quorum_unavailable"  err matches redlock.ErrQuorumUnavailable
//	"failed"              any other error
//
// These strings are also the values of scheduler.Record.Outcome and of the cronlock.outcome
// attribute of Trace's spans and Metrics' instruments.
func Outcome(err error) string {
	if err == nil {
		return outcome.Ran
	}
	if se, ok := errors.AsType[*job.SkipError](err); ok {
		switch se.Reason {
		case job.SkipHeld:
			return outcome.SkippedHeld
		case job.SkipDone:
			return outcome.SkippedDone
		case job.SkipOverlap:
			return outcome.SkippedOverlap
		case job.SkipLate:
			return outcome.SkippedLate
		case job.SkipPaused:
			return outcome.SkippedPaused
		}
	}
	switch {
	case errors.Is(err, ErrInterrupted):
		return outcome.Interrupted
	case errors.Is(err, job.ErrStopped):
		return outcome.Stopped
	case errors.Is(err, job.ErrReplaced):
		return outcome.Replaced
	case errors.Is(err, redlock.ErrLeaseLost):
		return outcome.LeaseLost
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		return outcome.QuorumUnavailable
	}
	return outcome.Failed
}
