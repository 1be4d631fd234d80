// Package outcome names the outcomes of a tick on one replica: the strings that
// middleware.Outcome returns, that scheduler.Record.Outcome holds, and that spans and metrics
// carry as cronlock.outcome. Every package that produces or reads an outcome names it here;
// docs/scheduler.md ("The handler chain") is their table for users. It imports nothing, so
// that any package may use it.
package outcome

// The outcomes of a tick on one replica. They are stored in the run history on the lock
// nodes: a change must keep the values that released versions wrote.
const (
	Ran               = "ran"
	Failed            = "failed"
	SkippedHeld       = "skipped_held"
	SkippedDone       = "skipped_done"
	SkippedOverlap    = "skipped_overlap"
	SkippedLate       = "skipped_late"
	SkippedPaused     = "skipped_paused"
	Replaced          = "replaced"
	LeaseLost         = "lease_lost"
	QuorumUnavailable = "quorum_unavailable"
	Stopped           = "stopped"
	Interrupted       = "interrupted"
)

// All is every outcome, in the order of the constants above.
var All = []string{Ran, Failed, SkippedHeld, SkippedDone, SkippedOverlap, SkippedLate, SkippedPaused,
	Replaced, LeaseLost, QuorumUnavailable, Stopped, Interrupted}
