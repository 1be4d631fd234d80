package job

import (
	"context"
	"time"
)

// Run holds the facts of one run of a tick. The scheduler puts it in the context passed to
// the handler chain; middleware that changes a field (Retry sets Attempt, Lock sets
// FencingToken) stores a changed copy with NewContext, so a *Run read from a context is never
// written again and is safe to keep.
type Run struct {
	// Job is the job's name.
	Job string
	// Tick is the scheduled instant this run is for (not the time it started); for a manual
	// run, the instant it was asked for.
	Tick time.Time
	// PlannedStart is when the run was planned to start: Tick plus the tick's jitter delay
	// (Options.Jitter), the same on every replica. It is Tick itself without jitter and for a
	// manual run. Ticks that start at once have that instant here: a missed tick caught up
	// when the scheduler starts (Options.CatchUp), and a past tick run by a backfill
	// (scheduler.Scheduler.Backfill); neither is delayed.
	PlannedStart time.Time
	// Trigger is the id of the manual run (scheduler.Trigger) that this run is, standing in for
	// the tick; empty for a scheduled tick.
	Trigger string
	// Backfill is true for a past tick run by scheduler.Scheduler.Backfill.
	Backfill bool
	// By names who asked for a manual run or a backfill: the operator
	// (scheduler.WithOperator), else the replica that was asked. Empty for a scheduled tick.
	By string
	// Attempt counts the attempts at this tick, from 1: across the cluster under a scheduler
	// (every replica's attempts count, see Options.Retries), on this replica with
	// middleware.Retry alone.
	Attempt int
	// FencingToken is the token of the tick's lock: strictly greater than the token of every
	// earlier run of this job, anywhere. Zero until the lock is taken. Pass it to storage that
	// refuses writes with a token lower than one it has seen.
	FencingToken uint64
	// Replica names the replica running it (scheduler.WithReplica).
	Replica string
	// Deadline is the end of the tick's window: no attempt of this tick starts at or after it
	// (on the scheduler's clock). It is the next tick, or the tick plus the tick retention
	// minus twice the max clock skew if that is earlier. Zero: no bound.
	Deadline time.Time
}

type runKey struct{}

// NewContext returns a copy of ctx that carries run.
func NewContext(ctx context.Context, run *Run) context.Context {
	return context.WithValue(ctx, runKey{}, run)
}

// RunFrom returns the Run carried by ctx, if any.
func RunFrom(ctx context.Context) (*Run, bool) {
	r, ok := ctx.Value(runKey{}).(*Run)
	return r, ok && r != nil
}
