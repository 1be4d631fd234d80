// Package scheduler runs cron jobs on every replica of a worker so that each tick of each job
// runs once across the cluster.
//
// Every replica builds a Scheduler over the same lock nodes, adds the same jobs, and starts
// it. Each replica computes the same ticks from the jobs' specs and fires them on its own
// clock; for each tick, the replicas race for the tick's lock (package middleware's Lock over
// package redlock) and one of them runs the job while the others skip it.
//
//	locks, _ := redlock.New(nodes)
//	s, _ := scheduler.New(locks, scheduler.WithReplica("worker-1"))
//	_ = s.Add(job.Job{Name: "report", Spec: "0 0 6 * * *", Handler: report})
//	_ = s.Start()
//	defer s.Stop(ctx) // starts nothing more; lets running jobs finish until ctx ends
//
// # First deployment
//
// New, empty lock nodes look like nodes that lost their memory, so they refuse locks for
// MaxTTL (a minute by default) and no tick runs until then. On first deployment only, end
// their quarantine once, before starting:
//
//	if err := locks.EndQuarantine(ctx); err != nil { // or: cronlock check --end-quarantine
//		return err
//	}
//
// Until then each refused tick is logged at Warn, naming that call.
//
// # Specs
//
// robfig/cron/v3's parser, with an optional seconds field and descriptors, and
// "CRON_TZ=Zone " prefixes; "@every d" is cronlock's own, aligned to the Unix epoch so every
// replica computes the same instants (see ParseSpec, which also says how daylight saving time
// is handled: a fixed-hour time that falls in a skipped hour runs once at the transition, one
// in a repeated hour runs once, at its first occurrence). Specs without CRON_TZ are in UTC
// unless WithLocation says otherwise.
//
// A job's spec may also use Jenkins' H forms in any cron field, alone or in a list: H (one
// value of the field's range; days of the month 1-28, which every month has), H(a-b) (one
// value in a-b), H/n (every n from an offset below n) and H(a-b)/n. Each is a value hashed
// from the job's name, the field and its place in the list: the same on every replica, across
// restarts and releases, so that "H H * * *" spreads many jobs over the day while each keeps
// one time. Add resolves them (Entry.Schedule shows the result) and refuses a malformed H,
// naming the field; ParseSpec does not take H.
//
// # The loop
//
// One goroutine keeps a min-heap of the jobs' next ticks and one timer for the earliest. A
// due tick runs in a goroutine of its own, owned by the scheduler, so a slow job never delays
// another's tick; the exact tick instant is passed down in job.Run.Tick (the tick's lock is
// named after it). If the loop falls behind (a paused process, a clock jump), only the newest
// due tick of each job fires; older ones are missed. Ticks missed while the scheduler was not
// running are skipped, unless the job has a CatchUp window: then the newest one within it
// runs at Start, if no replica ran it.
//
// # Options and their defaults
//
//   - WithClock: the system clock.
//   - WithPrefix: "cronlock" (lock keys are {prefix:job}:tick:<unix ms>, {prefix:job}:run and
//     {prefix:job}:fence).
//   - WithReplica: "hostname-pid".
//   - WithLogger: slog.Default().
//   - WithMiddleware: none.
//   - WithLocation: UTC.
//   - WithMaxClockSkew: 1s.
//   - WithTickRetention: max(2·MaxClockSkew + 1s, 1 min).
//   - WithLockConcurrency: 10·GOMAXPROCS tick locks requested at once.
//   - WithHistorySize: 100 records per job (History).
//
// A running scheduler also writes a heartbeat to the lock nodes every 10s (Replicas), with
// the main module's version from the build information, and looks for runs of its jobs whose
// replica vanished every 10s, to record them interrupted (docs/guarantees.md).
//
// # Control
//
// A Control — a scheduler's own (Scheduler.Control), or one made by NewControl for an admin
// tool that runs no jobs — acts on the cluster's jobs by name: Pause and Resume stop and
// restart a job on every replica, Trigger asks for one manual run, History reads what the
// cluster did, Status a job's pause, last runs and runs in flight, Replicas lists the
// schedulers of the cluster from their heartbeats (alive or missing, and whose configuration
// differs), and Forget removes what a retired job left on the nodes. A scheduler's Control
// refuses a job it does not have (ErrUnknownJob), and its Status includes the job's Entry. All of it lives on the lock nodes, under the job's hash tag (the trigger
// queue under the prefix's), written to a quorum and read merged: no coordinator, and a
// minority of nodes down loses nothing (docs/guarantees.md). Each records who asked: the
// operator named by the context (WithOperator), else the replica.
//
// Per job (job.Options): LockTTL 30s, RenewEvery LockTTL/3, Overlap Forbid, no Timeout, no
// Retries, no CatchUp.
//
// # Guarantees
//
// With a majority of lock nodes up and the replicas' clocks within MaxClockSkew of each other:
// each tick runs at most once at a time in the cluster, and never again once a run of it
// succeeded — however fast the job and however the clocks are skewed within the bound,
// because a tick that ran is kept as done for the tick retention and no replica attempts a
// tick later than retention − 2·MaxClockSkew after it. A run whose lease is lost has its
// context cancelled (cause redlock.ErrLeaseLost) before another replica can take the tick
// over. With Overlap Forbid (the default), no two runs of a job overlap anywhere in the
// cluster; a tick that comes while a run is still going is skipped everywhere.
//
// # What it does not guarantee
//
// A tick runs only if some replica is up at the tick (or within a CatchUp window) and a
// majority of lock nodes answer before the tick's window closes. A job that ignores its
// context may still be working when its lease is lost and the tick is retried elsewhere: use
// job.Run.FencingToken with storage that refuses stale tokens. Side effects are not made
// exactly-once. Replicas whose clocks are further apart than MaxClockSkew can run a tick
// twice.
//
// # Stop
//
// From the moment Stop is called, no handler and no retry starts: ticks still waiting for a
// lock, the nodes or a retry give up at once with outcome stopped (job.ErrStopped), and are
// released for other replicas. Runs under way drain under their leases until Stop's context
// ends, then are cancelled and end as stopped; Stop returns then, without waiting for them,
// with an error that names the runs left, and a later Stop waits for them. With no handler
// running, Stop returns nil at once, whatever its context and the nodes. From inside a
// handler, pass Stop the handler's context: it then does not wait for the calling run. A panic
// is logged at Error with its stack. docs/scheduler.md ("Stop") has the whole contract.
//
// A Scheduler is safe for concurrent use. Every run releases its lock as it ends; a Stop that
// returns nil has waited for every goroutine the scheduler started.
//
// # API at a glance
//
//	Task                         Identifiers
//	---------------------------  ------------------------------------------------------------
//	running jobs                 New, Option, Scheduler.Add, Scheduler.Remove, Scheduler.Start,
//	                             Scheduler.Stop; ErrStarted, ErrStopped, ErrDuplicate
//	options                      WithReplica, WithPrefix, WithLocation, WithLogger,
//	                             WithMiddleware, WithLockConcurrency, WithMaxClockSkew,
//	                             WithTickRetention, WithHistorySize
//	specs                        ParseSpec
//	seeing what runs             Scheduler.Entries (Entry)
//	control of the cluster       Scheduler.Control, or NewControl without a Scheduler
//	                             (Control: Pause, Resume, Trigger, History,
//	                             HistoryWithOutput (Record), Status (Status, its runs in
//	                             flight InFlight), Replicas (Replica));
//	                             ErrUnknownJob; Control.Forget (ErrJobRunning); who asks:
//	                             WithOperator
//	a run's output               KeepOutput (the last 64 KiB), read by HistoryWithOutput
//	running past ticks           Scheduler.Backfill (BackfillOptions, BackfillSummary)
//	testing with a fake clock    WithClock (a middleware.Clock)
package scheduler
