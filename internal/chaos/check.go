package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/scheduler"
)

// Params describes a chaos run to the checker.
type Params struct {
	Jobs     []JobSpec
	Interval time.Duration // every job's ticks are the multiples of Interval since the epoch
	// BurstEvery is the burst set's interval: its jobs' ticks are the multiples of it.
	BurstEvery time.Duration
	// Ticks in [From, To) are counted; runs are checked whenever they happened.
	From, To time.Time
	TTL      time.Duration // the tick locks' TTL
	// Replicas maps a replica name (the ledger's) to its worker's index in the timeline.
	Replicas map[string]int
	// Daemons are the replicas that are daemon workers.
	Daemons map[string]bool
	// Retries is the jobs' Retries: a tick has at most Retries+1 runs, over every replica.
	Retries int
	// Recorded is when the run history (Data.History) stopped growing: when the workers were
	// stopped. Zero: the history was not read, and the records are not checked.
	Recorded time.Time
	// RescueBound is how long after its run ended (or its worker was killed) a run's history
	// record is written at the latest: the run's own at its end, or interrupted, written by a
	// live replica's rescuer once the run's lock expired (the lock's TTL, then two looks).
	RescueBound time.Duration
	// HistorySize is how many records of a job the nodes keep: when Data.History has that
	// many of a job, the job's runs of ticks not after its oldest record's are not checked.
	HistorySize int
}

// JobSpec is one job the workers run.
type JobSpec struct {
	Name   string
	Forbid bool // Overlap Forbid; its runs write to the fenced store
	// Replace: Overlap Replace; its runs write to the fenced store, and each works longer than
	// the interval, so the next tick replaces it.
	Replace bool
	// Burst: one of the burst set (a Forbid job too), all due at the multiples of
	// Params.BurstEvery; its runs' lateness is reported (Result.BurstLateness).
	Burst bool
}

// every returns the interval of j's ticks.
func (p Params) every(j JobSpec) time.Duration {
	if j.Burst {
		return p.BurstEvery
	}
	return p.Interval
}

// exclusive reports whether no two runs of the job may run at once.
func (j JobSpec) exclusive() bool { return j.Forbid || j.Replace }

// Ways a missed tick is explained; see Check.
const (
	MissOverlap  = "previous run still running"
	MissLeftover = "previous run's lock left on a node its release missed"
	MissRunLost  = "run lost its lease or worker"
	MissHolder   = "holder paused, killed or cut off before it ran"
	MissNoQuorum = "no quorum reachable"
)

// Result is what Check found. The counts are the rows of docs/reliability.md.
type Result struct {
	Ticks int // ticks in [From, To), over all jobs
	Ran   int // of them, ticks with a run that finished with its context live
	Runs  int // runs started (any tick, any outcome)

	Duplicates int // ticks with more than one run finished with its context live
	// RunAfterSuccess counts ticks run again after one of their runs had succeeded (finished
	// with its context live): a run that succeeded is done.
	RunAfterSuccess int
	// TooManyRuns counts ticks with more runs than Retries+1.
	TooManyRuns int
	// EndedThenKilled counts runs that finished with their context live whose worker was
	// killed before the attempt ended: their history record is interrupted (a rescuer's). The
	// ledger's end is written by the handler before it returns, so such a run is not counted
	// as a success: its tick may be taken over once its lock expired, in the tick's window.
	EndedThenKilled int
	// SuccessNotRan counts runs that succeeded whose replica reported another outcome than
	// ran for their tick (lease_lost, say, when the lease was lost after the work ended).
	SuccessNotRan int

	Overlaps int // runs that started before an earlier conflicting run's context ended
	// Replaced counts runs stopped by a newer tick (context cause job.ErrReplaced); a tick
	// whose run was replaced counts as ran.
	Replaced int
	// ReplacedOverlaps counts runs of a Replace job that started before a replaced run of it
	// had returned: a newer tick starts only once the run it replaced is over.
	ReplacedOverlaps int
	// ClockStepOverlaps counts overlaps outside Redlock's assumptions, not counted in Overlaps:
	// the earlier run's lock was taken from it by a node clock step (node-clock) while it ran,
	// and its context was cancelled for it. Fencing is what protects writes then; the stale
	// writes check still applies.
	ClockStepOverlaps int
	StaleAccepted     int // writes the fenced store accepted with a token not above the last one
	// FencingBroken counts writes the store refused from runs whose context was live before
	// and after the write: a token that went backwards.
	FencingBroken int
	Accepted      int // writes the fenced store accepted
	Refused       int // stale writes it refused (from runs that had lost their lease)
	Unfinished    int // runs that neither finished nor were killed

	Missed      map[string]int // missed ticks per explanation
	Unexplained int            // missed ticks no fault explains

	// LeasesLost counts runs whose lease was lost (context cancelled with ErrLeaseLost), and
	// daemon workers' runs stopped by their supervisor while their daemon lived.
	LeasesLost            int
	LeasesLostUnexplained int // of them, those no fault on the worker explains
	Killed                int // runs whose worker was killed under them

	StartedWithoutQuorum int // runs that started while a majority of nodes was down

	// Orphans counts daemon workers' runs whose processes outlived their daemon's kill by
	// more than daemonGoneMax.
	Orphans int

	Outcomes map[string]int // tick outcomes reported by the replicas
	// IdleOverlapSkips counts a Forbid job's skipped_overlap outcomes while none of its runs
	// held its locks, from the replica's firing of the tick to its outcome: refusals by a run
	// key that a run had left on a node, or that a failed attempt held — and replicas that then
	// found the tick marked skipped. Not a violation: a liveness measure.
	IdleOverlapSkips int

	// Records counts the history records read (Data.History), Interrupted those with outcome
	// interrupted.
	Records, Interrupted int
	// AttemptRecordedTwice counts attempts (job, tick, attempt number) with more than one
	// record: each attempt ends in exactly one outcome.
	AttemptRecordedTwice int
	// NoRecord counts runs with no history record once Params.RescueBound had passed while the
	// workers ran, unless their worker could not reach a quorum of the nodes, or was paused,
	// during the run (its in-flight record or its own record may be on too few nodes).
	NoRecord int
	// KilledBeforeInFlight counts runs whose worker was killed under them, without a record,
	// whose in-flight record the nodes held on fewer than a quorum at the end (Data.InFlight):
	// the replica writes it in the background as the handler starts, and a kill can come
	// first. Not a violation: such a run is not promised a record (docs/guarantees.md).
	KilledBeforeInFlight int
	// KilledNotInterrupted counts runs whose worker was killed under them (they never
	// finished) whose record has another outcome than interrupted.
	KilledNotInterrupted int

	// StartedAfterStop counts runs that started after their worker process had begun to stop
	// (Data.Stops), by more than the time a run takes to record its start (stopStartSlack):
	// no run starts once Stop is called, or after the daemon's "stopping" line.
	StartedAfterStop int
	// StopStartLag is the longest a run within that slack started after its worker's stop
	// began (0: none did): how much of the slack the runs used.
	StopStartLag time.Duration

	// BurstTicks and BurstRan count the burst set's ticks in [From, To) and those that ran
	// (both also in Ticks and Ran); BurstLateness is the lateness of their first runs.
	BurstTicks, BurstRan int
	BurstLateness        Lateness

	// Violations describes every failed check, for the log.
	Violations []string
}

// Lateness summarizes how late runs started after their ticks: the first run of each tick.
type Lateness struct {
	Ticks         int // ticks with a run
	P50, P99, Max time.Duration
}

func (l Lateness) String() string {
	if l.Ticks == 0 {
		return "no runs"
	}
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	return fmt.Sprintf("p50 %s, p99 %s, max %s over %d ticks", ms(l.P50), ms(l.P99), ms(l.Max), l.Ticks)
}

// lateness summarizes ds (unsorted; sorted in place).
func lateness(ds []time.Duration) Lateness {
	if len(ds) == 0 {
		return Lateness{}
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return Lateness{Ticks: len(ds), P50: at(0.50), P99: at(0.99), Max: ds[len(ds)-1]}
}

// stopStartSlack bounds how long after its worker's stop began a run may record its start
// though the decision to start it came before: a testworker's handler records it as it begins,
// right after middleware.Lock's last look at Stop (a goroutine descheduled on a loaded host);
// a daemon worker's command records it as its first line, after the daemon's gate let it
// through, its supervisor process and its shell were spawned, and the daemon logged
// "stopping" after closing the gate.
func stopStartSlack(daemon bool) time.Duration {
	if daemon {
		return time.Second
	}
	return 250 * time.Millisecond
}

// OK reports whether every check passed.
func (r *Result) OK() bool { return len(r.Violations) == 0 }

// quorumStretchMin is how long a worker must have had a quorum within a tick's window for
// the tick to have been takeable: the longest backoff between attempts (500ms) and an attempt.
const quorumStretchMin = 700 * time.Millisecond

// leaseLostCause is redlock.ErrLeaseLost's text as a run's cause shows it, and replacedCause
// job.ErrReplaced's.
const (
	leaseLostCause = "lease lost"
	replacedCause  = "job: replaced"
)

// replaced reports whether run was stopped by a newer tick of its job.
func replaced(run *JobRun) bool {
	return run.Finished && run.Cancelled && strings.HasPrefix(run.Cause, replacedCause)
}

// daemonGoneMax is how long a daemon worker's run may outlive its daemon: the supervisor
// kills the run's process group as soon as the daemon's pipe closes (TestSupervisor's bound).
// Its backstop, SIGKILL at the lease's deadline, would still prevent an overlap.
const daemonGoneMax = time.Second

// StoppedCause is the cause the ledger gives a daemon worker's run that did not work to its
// end: its supervisor stopped it because its daemon died, or its lease was lost or about to
// be (SIGTERM comes kill_grace before the deadline).
const StoppedCause = "stopped before its work was done"

// Check verifies the guarantees of docs/guarantees.md on one chaos run:
//
//   - no tick ran twice: at most one run per tick finished with its context live, no run of
//     a tick started after one of its runs had succeeded, and no tick had more runs than
//     Retries+1; a replica whose run of a tick succeeded reports the tick ran (a run whose
//     worker was killed before its attempt ended, recorded interrupted, is no success: see
//     Result.EndedThenKilled);
//   - runs that exclude each other (of one tick; of one Forbid or Replace job) never
//     overlapped, unless the older run's context had ended (its exclusive section ends at the
//     earlier of its end and its context's deadline; a killed run's at the kill); and no run of
//     a Replace job started before a run it replaced had returned, context ended or not;
//   - the fenced store accepted only increasing tokens, and refused no write from a run whose
//     context was live before and after it;
//   - every tick in [From, To) without a finished run is explained by the timeline: a run of
//     its job still running or holding its lock (Forbid), or that ended while its worker could
//     not reach every node and so may have left its lock on one, where a replica found it
//     (skipped_overlap), a run of it that lost its lease or worker to a fault, a holder
//     paused or killed before it started (skipped_held, or skipped_overlap for a Forbid job:
//     the holder took the run key too), or no worker able to reach a quorum for long enough
//     in its window;
//   - every lease lost had a fault on its worker (pause, kill, or fewer than a quorum of
//     nodes reachable) while it ran; a daemon worker's run stopped before the end of its work
//     counts as killed if its daemon was killed while it ran, else as a lease lost;
//   - no run started while a majority of nodes was down or in quarantine;
//   - no daemon worker's run outlived its daemon's kill by more than daemonGoneMax;
//   - when the history was read (Params.Recorded), every attempt ends in exactly one record:
//     no attempt of a tick has two records, a run whose worker was killed under it is
//     recorded interrupted, and every run has its record once Params.RescueBound has passed
//     (see checkRecords);
//   - no run started after its worker process had begun to stop (see checkStops).
//
// The burst set's jobs (JobSpec.Burst) are checked as the others, their ticks at
// Params.BurstEvery, and the lateness of their first runs is reported.
func Check(p Params, tl *Timeline, d Data) *Result {
	r := &Result{Missed: map[string]int{}, Outcomes: map[string]int{}, Runs: len(d.Runs)}
	violate := func(format string, args ...any) { r.Violations = append(r.Violations, fmt.Sprintf(format, args...)) }

	type tickID struct {
		job  string
		tick int64
	}
	byTick := map[tickID][]*JobRun{}
	byJob := map[string][]*JobRun{}
	for i := range d.Runs {
		run := &d.Runs[i]
		byTick[tickID{run.Job, run.Tick.UnixMilli()}] = append(byTick[tickID{run.Job, run.Tick.UnixMilli()}], run)
		byJob[run.Job] = append(byJob[run.Job], run)
	}
	outcomes := map[tickID][]Outcome{}
	for _, o := range d.Outcomes {
		outcomes[tickID{o.Job, o.Tick.UnixMilli()}] = append(outcomes[tickID{o.Job, o.Tick.UnixMilli()}], o)
		r.Outcomes[o.Outcome]++
	}

	// Each run's exclusive section ends where its context ended or it stopped working.
	excEnd := map[*JobRun]time.Time{}
	lockEnd := map[*JobRun]time.Time{} // when its locks may have left the nodes, at the latest
	// leftEnd is, for a run that ended while its worker could not reach every node, when the
	// lock it may have left on such a node expires, at the latest: a release that misses a
	// node leaves the lock there until its TTL, and an acquisition that asks that node first
	// (redlock's primary-first path for contended locks) is refused until then.
	leftEnd := map[*JobRun]time.Time{}
	leaseOK := map[*JobRun]bool{} // a lost run's loss is explained by a fault
	for i := range d.Runs {
		run := &d.Runs[i]
		w := p.Replicas[run.Replica]
		switch {
		case !run.Finished:
			kill, ok := tl.killAfter(w, run.Start)
			if !ok {
				r.Unfinished++
				violate("run %s never finished and its worker was not killed", describe(run))
				kill = run.Start.Add(p.TTL)
			}
			r.Killed++
			excEnd[run], lockEnd[run], leaseOK[run] = kill, kill.Add(p.TTL), ok
		default:
			end := run.End
			if !run.Deadline.IsZero() && run.Deadline.Before(end) {
				end = run.Deadline
			}
			excEnd[run], lockEnd[run] = end, run.End
			if !tl.allUsable(w, run.End) {
				leftEnd[run] = run.End.Add(p.TTL)
			}
			if run.Cancelled {
				lockEnd[run] = later(run.End, run.Deadline).Add(p.TTL)
			}
			if tl.absent(w, run.End) {
				// A daemon worker's run can end while its daemon is paused or killed: its locks
				// are released when the daemon runs again, or expire.
				lockEnd[run] = later(lockEnd[run], run.End.Add(p.TTL))
			}
			stopped := run.Cancelled && run.Cause == StoppedCause
			if replaced(run) {
				r.Replaced++
				leaseOK[run] = true
			} else if kill, ok := tl.killAfter(w, run.Start); stopped && ok && !kill.After(run.End) {
				r.Killed++
				leaseOK[run] = true
			} else if stopped || run.Cancelled && strings.Contains(run.Cause, leaseLostCause) {
				r.LeasesLost++
				leaseOK[run] = tl.lostQuorum(w, run.Start, later(run.End, run.Deadline)) ||
					tl.clockStepped(run.Start, later(run.End, run.Deadline))
				if !leaseOK[run] {
					r.LeasesLostUnexplained++
					violate("run %s lost its lease without a fault on %s (%s)", describe(run), run.Replica, run.Cause)
				}
			}
		}
		if kill, ok := tl.killAfter(w, run.Start); ok && p.Daemons[run.Replica] && run.Finished && run.End.Sub(kill) > daemonGoneMax {
			r.Orphans++
			violate("run %s outlived its daemon, killed at %s, by %v", describe(run), fmtTime(kill), run.End.Sub(kill))
		}
		if tl.hardDownThrough(run.Start.Add(-time.Second), run.Start) {
			r.StartedWithoutQuorum++
			violate("run %s started while a majority of nodes was down or in quarantine", describe(run))
		}
	}
	checkExclusive := func(what string, runs []*JobRun) {
		runs = slices.Clone(runs)
		slices.SortFunc(runs, func(a, b *JobRun) int { return a.Start.Compare(b.Start) })
		var prev *JobRun
		for _, run := range runs {
			switch {
			case prev == nil || !run.Start.Before(excEnd[prev]):
			case prev.Cancelled && tl.clockStepped(prev.Start, run.Start):
				r.ClockStepOverlaps++
			default:
				r.Overlaps++
				violate("%s: run %s started %v before the context of run %s ended", what, describe(run), excEnd[prev].Sub(run.Start), describe(prev))
			}
			if prev == nil || excEnd[run].After(excEnd[prev]) {
				prev = run
			}
		}
	}
	ended := endedThenKilled(p, tl, d)
	r.EndedThenKilled = len(ended)
	succeeded := func(run *JobRun) bool { return run.Finished && !run.Cancelled && !ended[run] }
	for id, runs := range byTick {
		live := 0
		for _, run := range runs {
			if succeeded(run) {
				live++
			}
		}
		if live > 1 {
			r.Duplicates++
			violate("tick %s of %s ran %d times: %s", fmtTime(time.UnixMilli(id.tick)), id.job, live, describeAll(runs))
		}
		if again := runsAfterSuccess(runs, succeeded); again != "" {
			r.RunAfterSuccess++
			violate("tick %s of %s ran again after a run of it succeeded: %s", fmtTime(time.UnixMilli(id.tick)), id.job, again)
		}
		for _, run := range runs {
			if !succeeded(run) {
				continue
			}
			var reported []Outcome
			for _, o := range outcomes[id] {
				if o.Replica == run.Replica {
					reported = append(reported, o)
				}
			}
			if len(reported) > 0 && !slices.ContainsFunc(reported, func(o Outcome) bool { return o.Outcome == outcome.Ran }) {
				r.SuccessNotRan++
				violate("run %s succeeded but its replica reported %s", describe(run), describeOutcomes(reported))
			}
		}
		if len(runs) > p.Retries+1 {
			r.TooManyRuns++
			violate("tick %s of %s had %d runs, more than retries+1 (%d): %s", fmtTime(time.UnixMilli(id.tick)), id.job, len(runs), p.Retries+1, describeAll(runs))
		}
		checkExclusive("tick "+fmtTime(time.UnixMilli(id.tick))+" of "+id.job, runs)
	}
	for _, j := range p.Jobs {
		if j.exclusive() {
			checkExclusive("job "+j.Name, byJob[j.Name])
		}
		if !j.Replace {
			continue
		}
		for _, old := range byJob[j.Name] {
			if !replaced(old) {
				continue
			}
			for _, run := range byJob[j.Name] {
				if run != old && run.Start.After(old.Start) && run.Start.Before(old.End) {
					r.ReplacedOverlaps++
					violate("job %s: run %s started %v before the run it replaced, %s, returned", j.Name, describe(run), old.End.Sub(run.Start), describe(old))
				}
			}
		}
	}

	for _, o := range d.Outcomes {
		if o.Outcome == outcome.SkippedOverlap && !o.Fired.IsZero() && !slices.ContainsFunc(byJob[o.Job], func(run *JobRun) bool {
			return !run.Start.After(o.Done) && !lockEnd[run].Before(o.Fired)
		}) {
			r.IdleOverlapSkips++
		}
	}

	// The fenced store.
	for _, j := range p.Jobs {
		acc := d.Accepted[j.Name]
		r.Accepted += len(acc)
		r.Refused += len(d.Rejected[j.Name])
		for i := 1; i < len(acc); i++ {
			if acc[i].Token <= acc[i-1].Token {
				r.StaleAccepted++
				violate("fenced store of %s accepted token %d (%s) after %d (%s)", j.Name, acc[i].Token, acc[i].Replica, acc[i-1].Token, acc[i-1].Replica)
			}
		}
	}
	for i := range d.Runs {
		run := &d.Runs[i]
		if run.Write == "rejected" && !run.Cancelled && run.LiveAfter {
			r.FencingBroken++
			violate("fenced store refused token %d of run %s, whose lease was live: a later holder wrote a larger token first", run.Token, describe(run))
		}
	}

	checkRecords(p, tl, d, r, violate)

	checkStops(p, tl, d, r, violate)

	// Missed ticks.
	var late []time.Duration
	for _, j := range p.Jobs {
		every := p.every(j)
		for tick := firstTick(p.From, every); tick.Before(p.To); tick = tick.Add(every) {
			r.Ticks++
			id := tickID{j.Name, tick.UnixMilli()}
			runs := byTick[id]
			if j.Burst {
				r.BurstTicks++
				if len(runs) > 0 {
					first := slices.MinFunc(runs, func(a, b *JobRun) int { return a.Start.Compare(b.Start) })
					late = append(late, first.Start.Sub(tick))
				}
			}
			if slices.ContainsFunc(runs, func(run *JobRun) bool { return run.Finished && !run.Cancelled || replaced(run) }) {
				r.Ran++
				if j.Burst {
					r.BurstRan++
				}
				continue
			}
			why := explainMiss(p, tl, j, tick, runs, byJob[j.Name], outcomes[id], lockEnd, leftEnd, leaseOK)
			if why == "" {
				r.Unexplained++
				violate("tick %s of %s was missed and no fault explains it; outcomes: %s; runs: %s; faults near it: %s",
					fmtTime(tick), j.Name, describeOutcomes(outcomes[id]), describeAll(runs), tl.near(tick, every+p.TTL))
				continue
			}
			r.Missed[why]++
		}
	}
	r.BurstLateness = lateness(late)
	return r
}

// checkStops checks that no run started after its worker process had begun to stop: a run
// whose start is after a stop of its replica (Data.Stops) by more than stopStartSlack, with no
// new process of the worker started in between, is a violation.
func checkStops(p Params, tl *Timeline, d Data, r *Result, violate func(string, ...any)) {
	for i := range d.Runs {
		run := &d.Runs[i]
		w := p.Replicas[run.Replica]
		for _, st := range d.Stops {
			if st.Replica != run.Replica || !run.Start.After(st.At) || tl.startedDuring(w, st.At, run.Start) {
				continue
			}
			lag := run.Start.Sub(st.At)
			if lag > stopStartSlack(p.Daemons[run.Replica]) {
				r.StartedAfterStop++
				violate("run %s started %v after %s began to stop, at %s", describe(run), lag.Round(time.Millisecond), run.Replica, fmtTime(st.At))
				continue
			}
			r.StopStartLag = max(r.StopStartLag, lag)
		}
	}
}

// checkRecords checks the run history against the ledger's runs: each attempt of a tick has
// at most one record; each run, found by its token, has one once Params.RescueBound has
// passed since its end (or its worker's kill) while the workers ran, unless its worker could
// not reach a quorum or was paused while it ran; and a run that never finished (its worker killed) is
// recorded interrupted. Records of ticks not after the oldest kept record of a job whose
// history is full (Params.HistorySize) are not checked: older ones were trimmed.
func checkRecords(p Params, tl *Timeline, d Data, r *Result, violate func(string, ...any)) {
	if p.Recorded.IsZero() {
		return
	}
	type attemptID struct {
		job, trigger string
		tick         int64
		attempt      int
	}
	type runKey struct {
		job   string
		tick  int64
		token uint64
	}
	byAttempt := map[attemptID][]scheduler.Record{}
	byRun := map[runKey]scheduler.Record{}
	floor := map[string]time.Time{} // per job: records of ticks not after it may be trimmed
	count := map[string]int{}
	for _, rec := range d.History {
		r.Records++
		if rec.Outcome == outcome.Interrupted {
			r.Interrupted++
		}
		count[rec.Job]++
		if f, ok := floor[rec.Job]; !ok || rec.Tick.Before(f) {
			floor[rec.Job] = rec.Tick
		}
		if rec.Token != 0 {
			byRun[runKey{rec.Job, rec.Tick.UnixMilli(), rec.Token}] = rec
		}
		id := attemptID{rec.Job, rec.Trigger, rec.Tick.UnixMilli(), rec.Attempt}
		byAttempt[id] = append(byAttempt[id], rec)
	}
	checked := func(job string, tick time.Time) bool {
		return p.HistorySize == 0 || count[job] < p.HistorySize || tick.After(floor[job])
	}
	for id, recs := range byAttempt {
		if len(recs) > 1 && checked(id.job, time.UnixMilli(id.tick)) {
			r.AttemptRecordedTwice++
			violate("attempt %d of tick %s of %s has %d records: %s", id.attempt, fmtTime(time.UnixMilli(id.tick)), id.job, len(recs), describeRecords(recs))
		}
	}
	for i := range d.Runs {
		run := &d.Runs[i]
		if !checked(run.Job, run.Tick) {
			continue
		}
		w := p.Replicas[run.Replica]
		end, ok := run.End, run.Finished
		cut := end
		if !run.Finished {
			end, ok = tl.killAfter(w, run.Start)
			cut = end.Add(-step) // the worker is absent from its kill on
		}
		rec, found := byRun[runKey{run.Job, run.Tick.UnixMilli(), run.Token}]
		switch {
		case found && !run.Finished && rec.Outcome != outcome.Interrupted:
			r.KilledNotInterrupted++
			violate("run %s: its worker was killed under it, but its record says %s", describe(run), rec.Outcome)
		case found || !ok || end.Add(p.RescueBound).After(p.Recorded) || tl.lostQuorum(w, run.Start, cut):
		case !run.Finished && d.InFlight != nil && inFlightNodes(d, run) < tl.Quorum:
			r.KilledBeforeInFlight++
		default:
			r.NoRecord++
			violate("run %s has no history record %v after it ended", describe(run), p.Recorded.Sub(end).Round(time.Millisecond))
		}
	}
}

// inFlightNodes counts the nodes whose in-flight records of run's job mention its token.
func inFlightNodes(d Data, run *JobRun) int {
	token, n := strconv.FormatUint(run.Token, 10), 0
	for _, entries := range d.InFlight[run.Job] {
		if strings.Contains(entries, token) {
			n++
		}
	}
	return n
}

// endedThenKilled returns the runs that finished with their context live, whose worker was
// killed after they started, and whose history record is interrupted (Result.EndedThenKilled).
func endedThenKilled(p Params, tl *Timeline, d Data) map[*JobRun]bool {
	type runKey struct {
		job   string
		tick  int64
		token uint64
	}
	interrupted := map[runKey]bool{}
	for _, rec := range d.History {
		if rec.Outcome == outcome.Interrupted {
			interrupted[runKey{rec.Job, rec.Tick.UnixMilli(), rec.Token}] = true
		}
	}
	out := map[*JobRun]bool{}
	for i := range d.Runs {
		run := &d.Runs[i]
		if _, killed := tl.killAfter(p.Replicas[run.Replica], run.Start); killed && run.Finished && !run.Cancelled &&
			interrupted[runKey{run.Job, run.Tick.UnixMilli(), run.Token}] {
			out[run] = true
		}
	}
	return out
}

// runsAfterSuccess describes the first run of a tick that succeeded and the runs of the tick
// that started after it ended ("" if none did).
func runsAfterSuccess(runs []*JobRun, succeeded func(*JobRun) bool) string {
	var first *JobRun
	for _, run := range runs {
		if succeeded(run) && (first == nil || run.End.Before(first.End)) {
			first = run
		}
	}
	if first == nil {
		return ""
	}
	var after []*JobRun
	for _, run := range runs {
		if run.Start.After(first.End) {
			after = append(after, run)
		}
	}
	if len(after) == 0 {
		return ""
	}
	return describe(first) + " then " + describeAll(after)
}

// explainMiss returns why tick of j has no finished run, or "" if nothing explains it.
func explainMiss(p Params, tl *Timeline, j JobSpec, tick time.Time, runs, jobRuns []*JobRun, outcomes []Outcome,
	lockEnd, leftEnd map[*JobRun]time.Time, leaseOK map[*JobRun]bool) string {
	every := p.every(j)
	if len(runs) > 0 {
		for _, run := range runs {
			if !leaseOK[run] {
				return ""
			}
		}
		return MissRunLost
	}
	// Replicas fire the tick within MaxSkew of it and try until the next one.
	from, to := tick.Add(-time.Second/2), tick.Add(every+time.Second/2)
	if j.exclusive() {
		for _, run := range jobRuns {
			if run.Start.Before(to) && lockEnd[run].After(from) {
				return MissOverlap
			}
		}
		if slices.ContainsFunc(outcomes, func(o Outcome) bool { return o.Outcome == outcome.SkippedOverlap }) {
			for _, run := range jobRuns {
				if run.Start.Before(to) && leftEnd[run].After(from) {
					return MissLeftover
				}
			}
		}
	}
	// A replica paused or killed in the middle of its acquisition holds the tick's lock (and a
	// Forbid job's run key: the others skip the next ticks as overlaps) until its TTL. So does
	// one cut off from nodes that took its requests (a round trip above the node timeout): it
	// gives up, and its release does not reach them.
	if slices.ContainsFunc(outcomes, func(o Outcome) bool {
		return o.Outcome == outcome.SkippedHeld || j.exclusive() && o.Outcome == outcome.SkippedOverlap
	}) {
		if tl.workerAway(from, to.Add(p.TTL)) || tl.linkCutDuring(from, to) {
			return MissHolder
		}
	}
	for w := range tl.Workers {
		fire := tick.Add(-tl.offset(w, tick))
		if tl.quorumStretch(w, fire, fire.Add(every)) >= quorumStretchMin {
			return ""
		}
	}
	return MissNoQuorum
}

// hardDownThrough reports whether more than a minority of nodes was down or in quarantine
// throughout [from, to].
func (tl *Timeline) hardDownThrough(from, to time.Time) bool {
	for t := from; !t.After(to); t = t.Add(step) {
		if tl.hardDown(t) <= tl.Nodes-tl.Quorum {
			return false
		}
	}
	return true
}

// near lists the episodes that overlap [t-d, t+d].
func (tl *Timeline) near(t time.Time, d time.Duration) string {
	var out []string
	for _, e := range tl.Episodes {
		if e.Start.Before(t.Add(d)) && e.End.After(t.Add(-d)) {
			out = append(out, e.String())
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

func firstTick(from time.Time, interval time.Duration) time.Time {
	t := from.Truncate(interval)
	if t.Before(from) {
		t = t.Add(interval)
	}
	return t
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func fmtTime(t time.Time) string { return t.UTC().Format("15:04:05.000") }

func describe(run *JobRun) string {
	s := fmt.Sprintf("%s@%s by %s (token %d, start %s", run.Job, fmtTime(run.Tick), run.Replica, run.Token, fmtTime(run.Start))
	switch {
	case !run.Finished:
		s += ", never finished"
	case run.Cancelled:
		s += fmt.Sprintf(", end %s, cancelled: %s, deadline %s", fmtTime(run.End), run.Cause, fmtTime(run.Deadline))
	default:
		s += ", end " + fmtTime(run.End)
	}
	return s + ")"
}

func describeAll(runs []*JobRun) string {
	if len(runs) == 0 {
		return "none"
	}
	out := make([]string, len(runs))
	for i, run := range runs {
		out[i] = describe(run)
	}
	return strings.Join(out, ", ")
}

func describeRecords(recs []scheduler.Record) string {
	out := make([]string, len(recs))
	for i, rec := range recs {
		out[i] = fmt.Sprintf("%s by %s (token %d)", rec.Outcome, rec.Replica, rec.Token)
	}
	return strings.Join(out, ", ")
}

func describeOutcomes(os []Outcome) string {
	if len(os) == 0 {
		return "none"
	}
	out := make([]string, len(os))
	for i, o := range os {
		out[i] = o.Replica + ":" + o.Outcome
	}
	return strings.Join(out, " ")
}
