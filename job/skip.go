package job

import (
	"errors"
	"fmt"
	"time"
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
	// SkipPaused: the job is paused cluster-wide (scheduler.Pause); SkipError.Pause says why.
	SkipPaused
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
	case SkipPaused:
		return "job paused"
	}
	return fmt.Sprintf("SkipReason(%d)", int(r))
}

// Pause is a job's pause, as stored on the lock nodes.
type Pause struct {
	// Reason is why the job was paused, as the operator gave it.
	Reason string
	// Since is when it was paused (zero if unknown).
	Since time.Time
	// By names who paused it, e.g. the replica that was asked.
	By string
}

// SkipError is a skip. It matches ErrSkipped, and unwraps to the lock error that caused it,
// if any: for a tick found held or done, a *redlock.AcquireError whose Holder is what the
// lock nodes reported of its holder (the key found held, the metadata stored with it, and
// whether it is a marker of a completed or skipped tick).
type SkipError struct {
	Reason SkipReason
	// Holder is the label of who holds the tick (or the previous run), by default its replica
	// name; empty when unknown. With SkipDone, it is who completed the tick.
	Holder string
	// Pause is the job's pause when Reason is SkipPaused, else nil.
	Pause *Pause
	// Err is the underlying error, e.g. the lock client's.
	Err error
}

func (e *SkipError) Error() string {
	s := "job: skipped: " + e.Reason.String()
	if e.Holder != "" {
		s += fmt.Sprintf(" (%s)", e.Holder)
	}
	if e.Pause != nil && e.Pause.Reason != "" {
		s += fmt.Sprintf(" (%s)", e.Pause.Reason)
	}
	return s
}

// Unwrap returns ErrSkipped and the underlying error, if any: errors.Is matches both.
func (e *SkipError) Unwrap() []error { return withSentinel(ErrSkipped, e.Err) }

// withSentinel returns the errors an error type of this package unwraps to: its sentinel, and
// the error it wraps unless nil.
func withSentinel(sentinel, err error) []error {
	if err == nil {
		return []error{sentinel}
	}
	return []error{sentinel, err}
}

// ErrStopped is matched (errors.Is) by the error of a tick that this replica gave up because
// its scheduler is stopping: a tick whose handler had not started yet (it was waiting for its
// lock, for the lock nodes or for a retry), or a run whose context the scheduler cancelled
// when Stop's context ended. Such a tick is released, not kept as done, so another replica
// may still run it within its window.
var ErrStopped = errors.New("job: stopped: the scheduler is stopping")

// ErrReplaced is matched (errors.Is) by the cause with which a run of an Overlap Replace job
// is cancelled when a newer tick of the job asks it to stop, and by the error of that run.
// Its handler should return soon after: the newer tick starts only once the run released
// its lock.
var ErrReplaced = errors.New("job: replaced: a newer tick of the job asked this run to stop")
