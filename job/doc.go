// Package job describes a cron job as cronlock runs it: a name, a schedule and a
// func(ctx) error, with options for its lock, retries, overlap and catch-up, and the facts
// of one run (job name, scheduled tick, attempt, fencing token, replica) carried in the run's
// context.
//
// A Job is a plain value; package scheduler runs it, and package middleware wraps its Handler
// (Recover, Timeout, Lock, Retry…). Job.Validate refuses what cannot work, with an error that
// names the field and the fix.
//
//	j := job.Job{
//		Name:    "invoices",
//		Spec:    "0 */5 * * * *", // second 0 of every fifth minute
//		Handler: func(ctx context.Context) error {
//			run, _ := job.RunFrom(ctx)
//			return sendInvoices(ctx, run.Tick, run.FencingToken)
//		},
//		Options: job.Options{Timeout: 2 * time.Minute, Retries: 2},
//	}
//
// # Outcomes
//
// A run of a tick ends in one of a few ways, and Outcome names them from the error the
// handler chain returned: "ran" (nil), "failed", "skipped_held" (another replica is running
// the tick), "skipped_done" (the tick already ran somewhere), "skipped_overlap" (a previous
// run of the job is still running and Overlap is Forbid), "skipped_late" (the tick's window
// closed before an attempt could start), "lease_lost" (the run's lock could not be kept, its
// context was cancelled), "quorum_unavailable" (too many lock nodes down until the tick's
// window closed) and "stopped" (the scheduler is stopping: the tick was given up before its
// handler started, or the run was cut short; the error matches ErrStopped). Skips are errors matching ErrSkipped, of type *SkipError with the reason
// and, when known, who holds the tick.
//
// # What it does not do
//
// This package holds no state and starts no goroutines: it does not parse specs (package
// scheduler does, so that the spec's meaning is defined in one place) and does not talk to
// Redis.
//
// # API at a glance
//
//	Task                         Identifiers
//	---------------------------  ------------------------------------------------------------
//	defining a job               Job (Validate), Handler, Options, Overlap (Forbid, Allow,
//	                             Replace)
//	invalid jobs                 ErrInvalid, InvalidError
//	inside a handler             RunFrom (Run: the tick, fencing token, attempt, replica)
//	outcomes                     ErrSkipped, SkipError (SkipReason: SkipHeld, SkipDone,
//	                             SkipOverlap, SkipLate, SkipPaused), ErrStopped, ErrReplaced
//	pauses                       Pause
//	middleware and tests         NewContext (a Run in a context, as the scheduler passes it)
package job
