package middleware

import "go.opentelemetry.io/otel/attribute"

// scope is the instrumentation scope of cronlock's spans and instruments.
const scope = "github.com/cronlock/cronlock"

// Span and event names. docs/observability.md describes each with its attributes.
const (
	spanTick    = "cronlock.tick"
	spanTrigger = "cronlock.trigger" // a manual run, in place of the tick
	spanAcquire = "cronlock.lock.acquire"
	spanRun     = "cronlock.job.run"
	spanRelease = "cronlock.lock.release"

	eventRenewed       = "cronlock.lease.renewed"
	eventRenewalFailed = "cronlock.lease.renewal_failed"
	eventLost          = "cronlock.lease.lost"
	eventDuplicate     = "cronlock.duplicate.detected"
	eventReplacing     = "cronlock.replace.requested" // a tick asked the run under way to stop (job.Replace)
	eventReplaced      = "cronlock.run.replaced"      // this run was asked to stop by a newer tick
)

// Attribute keys, of spans, events and measurements.
const (
	attrJob      = attribute.Key("cronlock.job")
	attrTick     = attribute.Key("cronlock.tick")          // the scheduled instant, Unix milliseconds
	attrPlanned  = attribute.Key("cronlock.planned_start") // job.Run.PlannedStart, Unix milliseconds, when it is not the tick
	attrTrigger  = attribute.Key("cronlock.trigger")       // the id of a manual run
	attrBackfill = attribute.Key("cronlock.backfill")      // true for a past tick run by a backfill
	attrReplica  = attribute.Key("cronlock.replica")
	attrOutcome  = attribute.Key("cronlock.outcome")
	attrHolder   = attribute.Key("cronlock.holder")       // label of the replica that holds a skipped tick
	attrPause    = attribute.Key("cronlock.pause.reason") // why a skipped_paused tick's job is paused
	attrToken    = attribute.Key("cronlock.fencing_token")
	attrAttempt  = attribute.Key("cronlock.run.attempt") // job.Run.Attempt (Retry's count)

	attrLockAttempt  = attribute.Key("cronlock.lock.attempt")
	attrLockResult   = attribute.Key("cronlock.lock.result")
	attrPrimaryFirst = attribute.Key("cronlock.lock.primary_first")
	attrNodesOK      = attribute.Key("cronlock.lock.nodes.ok")
	attrNodesRefused = attribute.Key("cronlock.lock.nodes.refused")
	attrNodesQuar    = attribute.Key("cronlock.lock.nodes.quarantined")
	attrNodesErrored = attribute.Key("cronlock.lock.nodes.errored")
	attrQuorum       = attribute.Key("cronlock.lock.quorum")
	attrElapsed      = attribute.Key("cronlock.lock.elapsed_ms")
	attrValidity     = attribute.Key("cronlock.lock.validity_ms")
	attrKeepDone     = attribute.Key("cronlock.lock.keep_done")
	attrHolderDone   = attribute.Key("cronlock.holder.done")

	attrRenewal = attribute.Key("cronlock.lease.renewal") // the renewal's number, from 1
	attrCause   = attribute.Key("cronlock.cause")

	attrReason = attribute.Key("cronlock.reason") // of failure counters
)

// Results of one acquire attempt (attribute cronlock.lock.result); all but resultAcquired are
// also the reasons of cronlock.lock.acquire.failures.
const (
	resultAcquired    = "acquired"
	resultHeld        = "held"               // another replica holds the tick
	resultDone        = "done"               // the tick is kept as done
	resultOverlap     = "overlap"            // a previous run of the job holds the run key
	resultPaused      = "paused"             // the job is paused (its pause key refused the lock)
	resultUnavailable = "quorum_unavailable" // too many nodes failed or are in quarantine
	resultError       = "error"              // anything else, e.g. the context ended
)

// Causes of cronlock.job.timeouts: why a run's context was cut short.
const (
	causeLease    = "lease"    // the lease was lost: the lock's validity ran out before renewal
	causeTimeout  = "timeout"  // job.Options.Timeout (middleware.Timeout) passed
	causeReplaced = "replaced" // a newer tick asked the run to stop (job.Replace)
)

// Reasons of cronlock.lease.renewal.failures.
const (
	renewalLockLost    = "lock_lost"          // the lock is no longer ours on a quorum
	renewalUnavailable = "quorum_unavailable" // too many nodes failed to answer
	renewalError       = "error"
)
