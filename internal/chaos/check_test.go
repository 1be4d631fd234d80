package chaos

// The checker and the schedule are pure logic, tested here on ledgers and timelines written
// by hand: each check is shown to fail on the history it must reject, and to pass on the one
// next to it that it must accept.

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/scheduler"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const ms = time.Millisecond

func params(ticks int) Params {
	return Params{
		Jobs:     []JobSpec{{Name: "f", Forbid: true}},
		Interval: time.Second,
		From:     t0, To: at(time.Duration(ticks) * time.Second),
		TTL:      3 * time.Second,
		Replicas: map[string]int{"w0": 0, "w1": 1, "w2": 2},
	}
}

func timeline() *Timeline { return &Timeline{Nodes: 5, Workers: 3, Quorum: 3, Grace: time.Second} }

// run is a finished run of job f's tick i by replica, from start to end (offsets from t0).
func run(i int, replica string, token uint64, start, end time.Duration) JobRun {
	return JobRun{Job: "f", Replica: replica, Tick: at(time.Duration(i) * time.Second), Token: token,
		Start: at(start), Finished: true, End: at(end), Deadline: at(start + 3*time.Second)}
}

// clean is three ticks, each run once, one after the other, tokens increasing.
func clean() Data {
	return Data{Runs: []JobRun{
		run(0, "w0", 1, 10*ms, 300*ms),
		run(1, "w1", 2, 1010*ms, 1200*ms),
		run(2, "w2", 3, 2010*ms, 2500*ms),
	}}
}

func TestCheckPassesACleanRun(t *testing.T) {
	r := Check(params(3), timeline(), clean())
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 3, r.Ticks)
	assert.Equal(t, 3, r.Ran)
}

func TestCheckFindsADuplicateTick(t *testing.T) {
	d := clean()
	d.Runs = append(d.Runs, run(1, "w2", 4, 1600*ms, 1700*ms))
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Duplicates)
	assert.Zero(t, r.Overlaps, "one after the other: a duplicate all the same")
	assert.False(t, r.OK())
}

func TestCheckOverlapOfForbidRuns(t *testing.T) {
	d := clean()
	d.Runs[0].End = at(1100 * ms) // still running when tick 1's run started
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Overlaps)

	// The same, but the first run had lost its lease (context deadline passed) before.
	d.Runs[0].Cancelled, d.Runs[0].Cause, d.Runs[0].Deadline = true, "redlock: lease lost", at(900*ms)
	tl := timeline()
	tl.add(effect{kind: workerPaused, worker: 0, node: -1, from: at(100 * ms), to: at(1000 * ms)})
	r = Check(params(3), tl, d)
	assert.Zero(t, r.Overlaps)
	assert.Equal(t, 1, r.LeasesLost)
	assert.Equal(t, 1, r.Missed[MissRunLost], "tick 0's only run was cancelled")
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckFencedStore(t *testing.T) {
	d := clean()
	d.Accepted = map[string][]Write{"f": {{Token: 1}, {Token: 3}, {Token: 2}}}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.StaleAccepted)

	d = clean()
	d.Runs[1].Write, d.Runs[1].LiveAfter = "rejected", true
	r = Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.FencingBroken, "a live holder's write was refused")

	d.Runs[1].LiveAfter = false // it lost its lease during the write: a stale write, refused
	r = Check(params(3), timeline(), d)
	assert.Zero(t, r.FencingBroken)
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckMissedTicks(t *testing.T) {
	d := clean()
	d.Runs = d.Runs[:2] // tick 2 never ran
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Unexplained)
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "no fault explains")

	// A majority of nodes down over the tick's window explains it.
	tl := timeline()
	for _, n := range []int{0, 1, 2} {
		tl.add(effect{kind: nodeDown, worker: -1, node: n, from: at(1500 * ms), to: at(3500 * ms)})
	}
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Missed[MissNoQuorum])
	assert.True(t, r.OK(), "%v", r.Violations)

	// Two down and one worker cut off from a third: the other workers still had a quorum.
	tl = timeline()
	for _, n := range []int{0, 1} {
		tl.add(effect{kind: nodeDown, worker: -1, node: n, from: at(1500 * ms), to: at(3500 * ms)})
	}
	tl.add(effect{kind: linkCut, worker: 0, node: 2, from: at(1500 * ms), to: at(3500 * ms)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Unexplained)

	// A Forbid job's tick skipped because the previous run was still running.
	d = clean()
	d.Runs = d.Runs[:2]
	d.Runs[1].End = at(2300 * ms)
	r = Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Missed[MissOverlap])
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckLockLeftOnAMissedNode(t *testing.T) {
	// Tick 1's run ended while its worker could not reach node 0: its lock may stay there for
	// a TTL, and tick 2 was skipped as an overlap.
	d := clean()
	d.Runs = d.Runs[:2]
	d.Outcomes = []Outcome{{Job: "f", Tick: at(2 * time.Second), Replica: "w0", Outcome: "skipped_overlap"}}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Unexplained, "no fault: the skip is not explained")

	tl := timeline()
	tl.add(effect{kind: linkCut, worker: 1, node: 0, from: at(1100 * ms), to: at(1150 * ms)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Missed[MissLeftover])
	assert.True(t, r.OK(), "%v", r.Violations)

	d.Outcomes[0].Outcome = "quorum_unavailable" // but nothing refused it as an overlap
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Unexplained)
}

func TestCheckCountsOverlapSkipsWhileNoRunHeldTheLocks(t *testing.T) {
	d := clean()
	d.Outcomes = []Outcome{
		// Tick 1's run held the locks from 1010ms to 1200ms.
		{Job: "f", Tick: at(time.Second), Replica: "w0", Outcome: "skipped_overlap", Fired: at(1100 * ms), Done: at(1150 * ms)},
		{Job: "f", Tick: at(time.Second), Replica: "w2", Outcome: "skipped_overlap", Fired: at(900 * ms), Done: at(1020 * ms)},
		{Job: "f", Tick: at(2 * time.Second), Replica: "w0", Outcome: "skipped_overlap", Fired: at(1300 * ms), Done: at(1400 * ms)},
		{Job: "f", Tick: at(2 * time.Second), Replica: "w1", Outcome: "skipped_held", Fired: at(1300 * ms), Done: at(1400 * ms)},
	}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.IdleOverlapSkips, "the skip between tick 1's run and tick 2's")
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckHolderPausedMidAcquisition(t *testing.T) {
	// Tick 2 was skipped everywhere as an overlap, no run in sight: a replica took the run key
	// and was paused before it ran (its lock stays until its TTL).
	d := clean()
	d.Runs = d.Runs[:2]
	d.Outcomes = []Outcome{{Job: "f", Tick: at(2 * time.Second), Replica: "w1", Outcome: "skipped_overlap"}}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Unexplained, "no fault: the skip is not explained")

	tl := timeline()
	tl.add(effect{kind: workerPaused, worker: 0, node: -1, from: at(1500 * ms), to: at(6 * time.Second)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Missed[MissHolder])
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckHolderCutOffMidAcquisition(t *testing.T) {
	// Tick 2 was skipped everywhere as held, no run in sight: a replica whose replies came too
	// late took the tick's lock on the nodes, gave up, and could not release it.
	d := clean()
	d.Runs = d.Runs[:2]
	d.Outcomes = []Outcome{{Job: "f", Tick: at(2 * time.Second), Replica: "w1", Outcome: "skipped_held"}}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Unexplained, "no fault: the skip is not explained")

	tl := timeline()
	tl.add(effect{kind: linkCut, worker: 0, node: -1, from: at(1900 * ms), to: at(2500 * ms)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Missed[MissHolder])
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckLeaseLossNeedsAFault(t *testing.T) {
	d := clean()
	d.Runs[2].Cancelled, d.Runs[2].Cause, d.Runs[2].Deadline = true, "redlock: lease lost", at(2400*ms)
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.LeasesLostUnexplained)
	assert.Equal(t, 1, r.Unexplained, "the tick's only run was lost for no reason")

	tl := timeline()
	tl.add(effect{kind: linkCut, worker: 2, node: -1, from: at(2100 * ms), to: at(2200 * ms)})
	r = Check(params(3), tl, d)
	assert.Zero(t, r.LeasesLostUnexplained)
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckKilledRuns(t *testing.T) {
	d := clean()
	d.Runs[1].Finished, d.Runs[1].End = false, time.Time{}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Unfinished, "a run that never finished without a kill")

	tl := timeline()
	tl.add(effect{kind: workerKilled, worker: 1, node: -1, from: at(1100 * ms), to: at(3 * time.Second)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Killed)
	assert.Equal(t, 1, r.Missed[MissRunLost])
	assert.True(t, r.OK(), "%v", r.Violations)

	// Its locks stay until its TTL ran out: a run of the job starting before is an overlap
	// only if it starts before the kill.
	d.Runs[2].Start = at(1050 * ms)
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Overlaps)
}

// daemonRun is tick i's run by daemon worker replica as the harness writes it: no deadline,
// its end when its last process was gone.
func daemonRun(i int, replica string, token uint64, start, end time.Duration) JobRun {
	r := run(i, replica, token, start, end)
	r.Deadline = time.Time{}
	return r
}

func TestCheckDaemonRuns(t *testing.T) {
	// A daemon worker's run whose processes lived on past the next run's start is an overlap:
	// no deadline ends its exclusive section before its processes are gone.
	d := clean()
	d.Runs[0] = daemonRun(0, "w0", 1, 10*ms, 1100*ms)
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Overlaps)

	// Stopped before the end of its work while its daemon was killed: a killed run.
	d = clean()
	d.Runs[1] = daemonRun(1, "w1", 2, 1010*ms, 1200*ms)
	d.Runs[1].Cancelled, d.Runs[1].Cause = true, StoppedCause
	r = Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.LeasesLostUnexplained, "stopped with no fault on its daemon")
	tl := timeline()
	tl.add(effect{kind: workerKilled, worker: 1, node: -1, from: at(1100 * ms), to: at(3 * time.Second)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Killed)
	assert.Zero(t, r.LeasesLost)
	assert.Equal(t, 1, r.Missed[MissRunLost])
	assert.True(t, r.OK(), "%v", r.Violations)

	// Its work done while its daemon was paused: the daemon could not release its lock, and
	// the next tick was skipped.
	done := clean()
	done.Runs = []JobRun{done.Runs[0], daemonRun(1, "w1", 2, 1010*ms, 1500*ms)}
	done.Outcomes = []Outcome{{Job: "f", Tick: at(2 * time.Second), Replica: "w0", Outcome: "skipped_overlap"}}
	tl = timeline()
	tl.add(effect{kind: workerPaused, worker: 1, node: -1, from: at(1100 * ms), to: at(4 * time.Second)})
	r = Check(params(3), tl, done)
	assert.Equal(t, 1, r.Missed[MissOverlap])
	assert.True(t, r.OK(), "%v", r.Violations)

	// Its processes outlived their daemon's kill: the supervisor did not kill them at once.
	p := params(3)
	p.Daemons = map[string]bool{"w1": true}
	orphan := clean()
	orphan.Runs[1] = daemonRun(1, "w1", 2, 1010*ms, 2150*ms)
	orphan.Runs[2].Start = at(2200 * ms)
	killed := timeline()
	killed.add(effect{kind: workerKilled, worker: 1, node: -1, from: at(1100 * ms), to: at(3 * time.Second)})
	r = Check(p, killed, orphan)
	assert.Equal(t, 1, r.Orphans)
	orphan.Runs[1].End = at(1300 * ms) // gone 200ms after the kill
	r = Check(p, killed, orphan)
	assert.Zero(t, r.Orphans)

	// Stopped while its daemon was paused: its lease was lost.
	tl = timeline()
	tl.add(effect{kind: workerPaused, worker: 1, node: -1, from: at(1100 * ms), to: at(5 * time.Second)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.LeasesLost)
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckRunStartedWithoutQuorum(t *testing.T) {
	tl := timeline()
	for _, n := range []int{0, 1} {
		tl.add(effect{kind: nodeDown, worker: -1, node: n, from: at(-time.Minute), to: at(time.Minute)})
	}
	tl.add(effect{kind: nodeQuarantined, worker: -1, node: 4, from: at(-time.Minute), to: at(time.Minute)})
	r := Check(params(3), tl, clean())
	assert.Equal(t, 3, r.StartedWithoutQuorum)
	assert.False(t, r.OK())

	// A node that is being restarted may answer before the harness sees it ready.
	tl = timeline()
	for _, n := range []int{0, 1, 2} {
		tl.add(effect{kind: nodeDown, worker: -1, node: n, from: at(-time.Minute), to: at(3 * time.Second), upFrom: at(time.Second)})
	}
	r = Check(params(3), tl, clean())
	assert.Equal(t, 1, r.StartedWithoutQuorum, "only tick 0's run started before the restart began")
}

func TestParseLedger(t *testing.T) {
	runs, err := parseRuns(
		[]string{"f|1000|w0|7|2000", "f|2000|w1|8|3000"},
		[]string{"f|1000|w0|7|2000|2500|1|2400|redlock: lease lost|rejected|2450|0"},
	)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	assert.Equal(t, JobRun{Job: "f", Replica: "w0", Tick: time.UnixMilli(1000), Token: 7, Start: time.Unix(0, 2000),
		Finished: true, End: time.Unix(0, 2500), Cancelled: true, Deadline: time.Unix(0, 2400), Cause: "redlock: lease lost",
		Write: "rejected", WriteAt: time.Unix(0, 2450)}, runs[0])
	assert.False(t, runs[1].Finished)

	// A daemon worker's run has no deadline.
	runs, err = parseRuns([]string{"f|1000|d3|7|2000"}, []string{"f|1000|d3|7|2000|2500|0|0|||0|0"})
	require.NoError(t, err)
	assert.True(t, runs[0].Deadline.IsZero())

	_, err = parseRuns(nil, []string{"f|1000|w0|7|2000|2500|1|2400|x||0|0"})
	assert.ErrorContains(t, err, "never started")
	_, err = parseRuns([]string{"f|x|w0|7|2000"}, nil)
	assert.ErrorContains(t, err, "field 1")
	_, err = parseOutcomes([]string{"f|1000|w0|ran|1"})
	assert.ErrorContains(t, err, "5 fields, want 6")

	stops, err := parseStops([]string{"w1|2000"})
	require.NoError(t, err)
	assert.Equal(t, []Stop{{Replica: "w1", At: time.Unix(0, 2000)}}, stops)
	_, err = parseStops([]string{"w1|soon"})
	assert.ErrorContains(t, err, "field 1")
}

func TestParseClasses(t *testing.T) {
	all, err := ParseClasses("all")
	require.NoError(t, err)
	assert.Equal(t, Classes, all)
	got, err := ParseClasses("pause, skew,pause")
	require.NoError(t, err)
	assert.Equal(t, []Class{Pause, Skew}, got)
	_, err = ParseClasses("pause,meteor")
	assert.ErrorContains(t, err, `fault class "meteor" is unknown`)
}

func TestPlanIsSeededAndKeepsItsLimits(t *testing.T) {
	s := defaults
	a := plan(42, 10*time.Minute, Classes, s)
	assert.Equal(t, a, plan(42, 10*time.Minute, Classes, s), "same seed, same schedule")
	assert.NotEqual(t, a, plan(43, 10*time.Minute, Classes, s))

	seen := map[Class]bool{}
	for _, e := range a {
		seen[e.class] = true
		assert.LessOrEqual(t, e.end(), 10*time.Minute)
	}
	assert.Len(t, seen, len(Classes), "ten minutes draw every class")

	// At every instant: at most a minority of nodes faulty (except MajorityKill), one worker
	// away at most, and exclusive episodes alone.
	for ms := range 10 * 60 * 1000 / 50 {
		now := time.Duration(ms) * 50 * time.Millisecond
		var active []planned
		for _, e := range a {
			if e.at <= now && now <= e.end() {
				active = append(active, e)
			}
		}
		var nodes []int
		absent := 0
		for _, e := range active {
			if e.exclusive() {
				assert.Len(t, active, 1, "at +%v: %v is not alone", now, e)
			}
			if e.absence() {
				absent++
			}
			if len(e.workers) == 0 && e.class != MajorityKill {
				for _, n := range e.nodes {
					if !slices.Contains(nodes, n) {
						nodes = append(nodes, n)
					}
				}
			}
		}
		assert.LessOrEqual(t, len(nodes), s.nodes-s.quorum, "at +%v: %v", now, active)
		assert.LessOrEqual(t, absent, 1, "at +%v: %v", now, active)
	}
}

func TestPlanSkewsNoDaemon(t *testing.T) {
	s := defaults
	s.daemons = 2
	skews := 0
	for _, e := range plan(42, 10*time.Minute, []Class{Skew, Pause}, s) {
		if e.class == Skew {
			skews++
			assert.Less(t, e.workers[0], s.workers-s.daemons, "%v targets a daemon worker", e)
		}
	}
	assert.Positive(t, skews)

	s.daemons = s.workers
	for _, e := range plan(42, 10*time.Minute, []Class{Skew, Pause}, s) {
		assert.Equal(t, Pause, e.class)
	}
}

func TestReplayCommand(t *testing.T) {
	cfg := Config{Seed: 9, Duration: 2 * time.Minute, Faults: Classes, Burst: 300}
	assert.Equal(t, "make chaos DURATION=2m0s SEED=9 FAULTS=all DAEMONS=0 BURST=300", ReplayCommand(cfg))
	cfg.Faults, cfg.Daemons = []Class{Pause, NodeClock}, 2
	assert.True(t, strings.HasSuffix(ReplayCommand(cfg), "FAULTS=pause,node-clock DAEMONS=2"))
	cfg.Store = PostgresStore
	assert.True(t, strings.HasSuffix(ReplayCommand(cfg), "DAEMONS=2 FENCE=postgres"))
	cfg.Faults, cfg.Burst, cfg.Store = []Class{Burst}, 50, RedisStore
	assert.True(t, strings.HasSuffix(ReplayCommand(cfg), "FAULTS=burst DAEMONS=2 BURST=50"), ReplayCommand(cfg))
}

func TestPlanLandsBurstFaultsInBursts(t *testing.T) {
	s := defaults
	s.daemons = 1
	a := plan(7, 10*time.Minute, []Class{Burst}, s)
	assert.GreaterOrEqual(t, len(a), 50, "about one per burst")
	seen := map[Class]bool{}
	for _, e := range a {
		assert.Equal(t, Burst, e.class)
		assert.Contains(t, burstFaults, e.fault)
		seen[e.fault] = true
		// From 300ms before an instant to 500ms after (the fault phase starts at one).
		off := e.at % s.burstEvery
		assert.True(t, off <= 500*time.Millisecond || off >= s.burstEvery-300*time.Millisecond, "%v", e)
		switch e.fault {
		case Latency:
			assert.GreaterOrEqual(t, e.latency, 100*time.Millisecond, "%v: above the node timeout", e)
		case WorkerStop:
			assert.Len(t, e.workers, 1)
		case Reload:
			assert.Equal(t, []int{s.workers - 1}, e.workers, "%v: the daemon worker", e)
		}
	}
	assert.Len(t, seen, len(burstFaults), "ten minutes draw every fault")

	s.daemons = 0
	for _, e := range plan(7, 10*time.Minute, []Class{Burst}, s) {
		assert.NotEqual(t, Reload, e.fault, "no daemon to reload")
	}
}

func TestCheckFindsATickRunAgainAfterASuccess(t *testing.T) {
	p := params(3)
	p.Retries = 2
	d := clean()
	// Tick 1 succeeded at 1.2s; a retry that failed (its context ended) started after it.
	again := run(1, "w1", 4, 1300*ms, 1400*ms)
	again.Cancelled, again.Cause = true, "redlock: lease lost"
	d.Runs = append(d.Runs, again)
	r := Check(p, timeline(), d)
	assert.Equal(t, 1, r.RunAfterSuccess, "%v", r.Violations)
	assert.Contains(t, strings.Join(r.Violations, "\n"), "ran again after a run of it succeeded")

	// A run that failed before the success is a retry, not a run after it.
	d = clean()
	before := run(1, "w0", 2, 1005*ms, 1008*ms)
	before.Cancelled, before.Cause = true, "redlock: lease lost"
	d.Runs = append(d.Runs, before)
	d.Runs[1].Token = 5
	tl := timeline()
	tl.add(effect{kind: workerPaused, worker: 0, node: -1, from: at(1000 * ms), to: at(1010 * ms)})
	r = Check(p, tl, d)
	assert.Zero(t, r.RunAfterSuccess, "%v", r.Violations)
}

func TestCheckFindsMoreRunsOfATickThanRetries(t *testing.T) {
	p := params(3)
	p.Retries = 1
	d := clean()
	// Tick 1: two failed runs (each lost its lease while its worker was paused), then the
	// success: three runs, one more than retries+1.
	for i, start := range []time.Duration{1005 * ms, 1020 * ms} {
		f := run(1, "w0", uint64(10+i), start, start+5*ms)
		f.Cancelled, f.Cause = true, "redlock: lease lost"
		d.Runs = append(d.Runs, f)
	}
	d.Runs[1].Token = 20
	tl := timeline()
	tl.add(effect{kind: workerPaused, worker: 0, node: -1, from: at(1000 * ms), to: at(1030 * ms)})
	r := Check(p, tl, d)
	assert.Equal(t, 1, r.TooManyRuns, "%v", r.Violations)
	assert.Contains(t, strings.Join(r.Violations, "\n"), "had 3 runs, more than retries+1 (2)")

	p.Retries = 2
	r = Check(p, tl, d)
	assert.Zero(t, r.TooManyRuns, "%v", r.Violations)
}

func TestCheckFindsASuccessNotReportedRan(t *testing.T) {
	d := clean()
	// w1's run of tick 1 succeeded; its lease was lost after, while w1 was paused.
	d.Outcomes = []Outcome{{Job: "f", Replica: "w1", Tick: at(time.Second), Outcome: "lease_lost"}}
	r := Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.SuccessNotRan, "%v", r.Violations)
	assert.Contains(t, strings.Join(r.Violations, "\n"), "succeeded but its replica reported w1:lease_lost")

	d.Outcomes[0].Outcome = "ran"
	r = Check(params(3), timeline(), d)
	assert.True(t, r.OK(), "%v", r.Violations)
}

func TestCheckOverlapAfterANodeClockStep(t *testing.T) {
	// A daemon's run whose lock a node's clock step took from it (it held exactly a quorum): its
	// lease is lost, its supervisor stops it, and another worker's run starts before its
	// processes are gone. Outside Redlock's assumptions: counted apart, not a violation.
	d := clean()
	d.Runs[0] = daemonRun(0, "w0", 1, 10*ms, 1100*ms)
	d.Runs[0].Cancelled, d.Runs[0].Cause = true, StoppedCause
	tl := timeline()
	tl.add(effect{kind: nodeClockStepped, worker: -1, node: 3, from: at(500 * ms), to: at(9 * time.Second)})
	r := Check(params(3), tl, d)
	assert.Zero(t, r.Overlaps)
	assert.Equal(t, 1, r.ClockStepOverlaps)
	assert.Zero(t, r.LeasesLostUnexplained, "the clock step explains the lost lease")
	assert.True(t, r.OK(), "%v", r.Violations)

	// Without the step, the same history is an overlap and an unexplained lease loss.
	r = Check(params(3), timeline(), d)
	assert.Equal(t, 1, r.Overlaps)
	assert.Equal(t, 1, r.LeasesLostUnexplained)

	// A step after the second run started explains nothing about its start.
	tl = timeline()
	tl.add(effect{kind: nodeClockStepped, worker: -1, node: 3, from: at(1050 * ms), to: at(9 * time.Second)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Overlaps)

	// Nor is an overlap excused when the earlier run never learnt that it lost its lock.
	d.Runs[0].Cancelled, d.Runs[0].Cause = false, ""
	tl = timeline()
	tl.add(effect{kind: nodeClockStepped, worker: -1, node: 3, from: at(500 * ms), to: at(9 * time.Second)})
	r = Check(params(3), tl, d)
	assert.Equal(t, 1, r.Overlaps)
	assert.Zero(t, r.ClockStepOverlaps)
}

func TestCheckHostStallExplainsAMiss(t *testing.T) {
	d := clean()
	d.Runs = d.Runs[:2] // tick 2 never ran
	tl := timeline()
	for _, n := range []int{0, 1, 2} {
		require.True(t, tl.addStall(effect{kind: nodeStalled, worker: -1, node: n, from: at(1900 * ms), to: at(3100 * ms)}))
	}
	r := Check(params(3), tl, d)
	assert.Equal(t, 1, r.Missed[MissNoQuorum], "three of five nodes did not answer the probe over the tick")
	assert.True(t, r.OK(), "%v", r.Violations)

	// A stall on a node that the schedule had killed is that fault, not the host's.
	tl = timeline()
	tl.add(effect{kind: nodeDown, worker: -1, node: 0, from: at(1500 * ms), to: at(2000 * ms)})
	assert.False(t, tl.addStall(effect{kind: nodeStalled, worker: -1, node: 0, from: at(2500 * ms), to: at(2600 * ms)}),
		"within the grace after the restart")
	assert.True(t, tl.addStall(effect{kind: nodeStalled, worker: -1, node: 1, from: at(2500 * ms), to: at(2600 * ms)}))
	assert.True(t, tl.addStall(effect{kind: nodeStalled, worker: -1, node: 0, from: at(3100 * ms), to: at(3200 * ms)}))
}

// A Replace job: each run is replaced by the next tick, which starts once it returned. A
// replaced run's tick counts as ran, its cancellation is no lost lease; a successor that
// started before the replaced run returned is a violation, even after its context ended.
func TestCheckReplacedRuns(t *testing.T) {
	p := params(3)
	p.Jobs = []JobSpec{{Name: "f", Replace: true}}
	replacedRun := func(i int, replica string, token uint64, start, end time.Duration) JobRun {
		r := run(i, replica, token, start, end)
		r.Cancelled, r.Cause = true, "job: replaced: a newer tick of the job asked this run to stop"
		return r
	}
	d := Data{Runs: []JobRun{
		replacedRun(0, "w0", 1, 10*ms, 1005*ms),
		replacedRun(1, "w1", 2, 1010*ms, 2005*ms),
		run(2, "w2", 3, 2010*ms, 2500*ms),
	}}
	r := Check(p, timeline(), d)
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 3, r.Ran)
	assert.Equal(t, 2, r.Replaced)
	assert.Zero(t, r.LeasesLost)

	// Tick 1's run started before tick 0's returned, after its context had ended.
	d.Runs[0].End, d.Runs[0].Deadline = at(1100*ms), at(1000*ms)
	r = Check(p, timeline(), d)
	assert.Equal(t, 1, r.ReplacedOverlaps)
	assert.Zero(t, r.Overlaps, "the context had ended: no overlap by the Forbid rule")
	assert.False(t, r.OK())
}

func TestParseStore(t *testing.T) {
	st, err := ParseStore("postgres")
	require.NoError(t, err)
	assert.Equal(t, PostgresStore, st)
	_, err = ParseStore("mysql")
	assert.ErrorContains(t, err, `fenced store "mysql" is unknown: use redis or postgres`)
}

// recorded is params(3) with the history read 30s after t0, each record due 5s after its run.
func recorded() Params {
	p := params(3)
	p.Recorded, p.RescueBound, p.HistorySize = at(30*time.Second), 5*time.Second, 100
	return p
}

// record is run's history record with outcome, as attempt attempt.
func record(run JobRun, attempt int, outcome string) scheduler.Record {
	return scheduler.Record{Job: run.Job, Tick: run.Tick, Attempt: attempt, Replica: run.Replica, Outcome: outcome, Start: run.Start, Token: run.Token}
}

// cleanRecorded is clean with each run's record.
func cleanRecorded() Data {
	d := clean()
	for _, run := range d.Runs {
		d.History = append(d.History, record(run, 1, outcome.Ran))
	}
	return d
}

func TestCheckRecords(t *testing.T) {
	r := Check(recorded(), timeline(), cleanRecorded())
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 3, r.Records)

	// Not read: nothing checked.
	r = Check(params(3), timeline(), clean())
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Zero(t, r.Records)

	// A run without its record.
	d := cleanRecorded()
	d.History = d.History[:2]
	r = Check(recorded(), timeline(), d)
	assert.Equal(t, 1, r.NoRecord)
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "has no history record")

	// ... not yet due when the history stopped growing,
	p := recorded()
	p.Recorded = at(7 * time.Second) // tick 2's run ended at 2.5s: due at 7.5s
	r = Check(p, timeline(), d)
	assert.True(t, r.OK(), "%v", r.Violations)

	// ... or its worker cut off from a quorum while it ran.
	tl := timeline()
	for _, n := range []int{0, 1, 2} {
		tl.add(effect{kind: linkCut, worker: 2, node: n, from: at(2100 * ms), to: at(2200 * ms)})
	}
	r = Check(recorded(), tl, d)
	assert.True(t, r.OK(), "%v", r.Violations)

	// ... or its tick older than a full history's oldest record.
	p = recorded()
	p.HistorySize = 2
	d = cleanRecorded()
	d.History = d.History[1:] // ticks 1 and 2 kept; tick 0's trimmed
	d.Runs[2].Token = 9       // tick 2's record is not its run's
	r = Check(p, timeline(), d)
	assert.Equal(t, 1, r.NoRecord, "tick 2's run is checked, tick 0's not")
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "f@12:00:02.000")
}

func TestCheckAttemptRecordedTwice(t *testing.T) {
	// Two records of tick 1's first attempt: its run's, and another with another token.
	d := cleanRecorded()
	other := d.Runs[1]
	other.Token, other.Replica = 7, "w2"
	d.History = append(d.History, record(other, 1, outcome.Interrupted))
	r := Check(recorded(), timeline(), d)
	assert.Equal(t, 1, r.AttemptRecordedTwice)
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "attempt 1 of tick 12:00:01.000 of f has 2 records")

	// The same as attempt 2: two attempts, one record each.
	d.History[3].Attempt = 2
	r = Check(recorded(), timeline(), d)
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 1, r.Interrupted)
}

func TestCheckKilledRunRecordedInterrupted(t *testing.T) {
	// Tick 1's run never finished: its worker was killed at 1.1s.
	d := cleanRecorded()
	d.Runs[1].Finished, d.Runs[1].End, d.Runs[1].Deadline = false, time.Time{}, time.Time{}
	tl := timeline()
	tl.add(effect{kind: workerKilled, worker: 1, node: -1, from: at(1100 * ms), to: at(3 * time.Second)})
	d.History[1].Outcome = outcome.Interrupted
	r := Check(recorded(), tl, d)
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 1, r.Interrupted)

	// Recorded with another outcome: its worker could not have written it.
	d.History[1].Outcome = outcome.Ran
	r = Check(recorded(), tl, d)
	assert.Equal(t, 1, r.KilledNotInterrupted)
	require.Len(t, r.Violations, 1)

	// Not recorded at all, long after the kill: no live replica rescued it.
	d.History = slices.Delete(d.History, 1, 2)
	r = Check(recorded(), tl, d)
	assert.Equal(t, 1, r.NoRecord)
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "has no history record")

	// Its in-flight record on a quorum of the nodes at the end (its token, 2): no rescuer took it.
	d.InFlight = map[string][]string{"f": {`2={"token":2}`, `2={"token":2}`, `2={"token":2}`, "", `3={"token":3}`}}
	r = Check(recorded(), tl, d)
	assert.Equal(t, 1, r.NoRecord)

	// On two of the five: the kill came before the replica's background write reached a
	// quorum, and such a run is not promised a record.
	d.InFlight["f"][2] = ""
	r = Check(recorded(), tl, d)
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 1, r.KilledBeforeInFlight)
	assert.Zero(t, r.NoRecord)
}

// burstParams is params(30) with a burst set of two jobs due every 10s.
func burstParams() Params {
	p := params(30)
	p.BurstEvery = 10 * time.Second
	p.Jobs = []JobSpec{{Name: "b0", Forbid: true, Burst: true}, {Name: "b1", Forbid: true, Burst: true}}
	return p
}

// burstRun is a run of burst job job's tick i (a multiple of 10s) by replica, started late
// after it and working 50ms.
func burstRun(job string, i int, replica string, token uint64, late time.Duration) JobRun {
	tick := time.Duration(i) * 10 * time.Second
	return JobRun{Job: job, Replica: replica, Tick: at(tick), Token: token, Start: at(tick + late), Finished: true,
		End: at(tick + late + 50*ms), Deadline: at(tick + late + 3*time.Second)}
}

// burstClean is the three burst instants of burstParams, each tick of both jobs run once.
func burstClean() Data {
	var d Data
	for i := range 3 {
		d.Runs = append(d.Runs, burstRun("b0", i, "w0", uint64(1+i), 20*ms), burstRun("b1", i, "w1", uint64(1+i), time.Duration(30+10*i)*ms))
	}
	return d
}

func TestCheckBurstTicks(t *testing.T) {
	r := Check(burstParams(), timeline(), burstClean())
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 6, r.BurstTicks, "two jobs, an instant every 10s over 30s")
	assert.Equal(t, 6, r.BurstRan)
	assert.Equal(t, 6, r.Ticks)

	// Tick 20s of b1 missed: no fault explains it.
	d := burstClean()
	d.Runs = d.Runs[:5]
	r = Check(burstParams(), timeline(), d)
	assert.Equal(t, 1, r.Unexplained)
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "tick 12:00:20.000 of b1 was missed")

	// A majority of nodes down over its window (the instant and until the next one) explains
	// the instant's misses.
	d.Runs = d.Runs[:4]
	tl := timeline()
	for _, n := range []int{0, 1, 2} {
		tl.add(effect{kind: nodeDown, worker: -1, node: n, from: at(19 * time.Second), to: at(31 * time.Second)})
	}
	r = Check(burstParams(), tl, d)
	assert.Equal(t, 2, r.Missed[MissNoQuorum])
	assert.True(t, r.OK(), "%v", r.Violations)

	// One second of it, early in the window, does not: the workers had nine more to take it.
	tl = timeline()
	for _, n := range []int{0, 1, 2} {
		tl.add(effect{kind: nodeDown, worker: -1, node: n, from: at(19 * time.Second), to: at(21 * time.Second)})
	}
	r = Check(burstParams(), tl, d)
	assert.Equal(t, 2, r.Unexplained)

	// The safety checks apply to burst jobs too: a tick of b0 run twice.
	d = burstClean()
	d.Runs = append(d.Runs, burstRun("b0", 1, "w2", 9, 500*ms))
	r = Check(burstParams(), timeline(), d)
	assert.Equal(t, 1, r.Duplicates)
}

func TestCheckBurstLateness(t *testing.T) {
	p := burstParams()
	p.Retries = 1
	d := burstClean()
	d.Runs[0] = burstRun("b0", 0, "w0", 1, 900*ms)
	// A run of tick 0 of b0 before w0's, which lost its lease: the first run counts.
	failed := burstRun("b0", 0, "w2", 7, 5*ms)
	failed.Cancelled, failed.Cause, failed.End, failed.Deadline = true, "redlock: lease lost", at(10*ms), at(10*ms)
	d.Runs = append(d.Runs, failed)
	tl := timeline()
	tl.add(effect{kind: workerPaused, worker: 2, node: -1, from: at(0), to: at(100 * ms)})
	r := Check(p, tl, d)
	assert.True(t, r.OK(), "%v", r.Violations)
	// First runs' lateness: b0 5, 20, 20ms; b1 30, 40, 50ms.
	assert.Equal(t, Lateness{Ticks: 6, P50: 30 * ms, P99: 50 * ms, Max: 50 * ms}, r.BurstLateness)
	assert.Equal(t, "p50 30ms, p99 50ms, max 50ms over 6 ticks", r.BurstLateness.String())

	r = Check(params(3), timeline(), clean())
	assert.Zero(t, r.BurstLateness, "no burst set")
	assert.Equal(t, "no runs", r.BurstLateness.String())
}

func TestCheckRunStartedAfterStop(t *testing.T) {
	// w1 began to stop 10ms before the instant 10s, and started again at 15s. Its run of b1 at
	// 10s started 40ms after the instant: 50ms after the stop, within the slack (its handler
	// was let through before the stop); its run at 20s is the new process's.
	d := burstClean()
	d.Stops = []Stop{{Replica: "w1", At: at(10*time.Second - 10*ms)}}
	tl := timeline()
	tl.started(1, at(-time.Minute))
	tl.started(1, at(15*time.Second))
	r := Check(burstParams(), tl, d)
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 50*ms, r.StopStartLag)

	// Not started again: its run at 20s started 10s after the stop.
	tl = timeline()
	tl.started(1, at(-time.Minute))
	r = Check(burstParams(), tl, d)
	assert.Equal(t, 1, r.StartedAfterStop)
	require.Len(t, r.Violations, 1)
	assert.Contains(t, r.Violations[0], "b1@12:00:20.000 by w1")
	assert.Contains(t, r.Violations[0], "started 10.06s after w1 began to stop, at 12:00:09.990")

	// The slack: 250ms for a testworker's run, 1s for a daemon worker's command.
	p := burstParams()
	p.Daemons = map[string]bool{"w2": true}
	d = Data{Runs: []JobRun{burstRun("b0", 1, "w1", 1, 300*ms)}, Stops: []Stop{{Replica: "w1", At: at(10 * time.Second)}}}
	r = Check(p, timeline(), d)
	assert.Equal(t, 1, r.StartedAfterStop, "300ms after a testworker's stop")
	d.Runs[0].Replica, d.Stops[0].Replica = "w2", "w2"
	r = Check(p, timeline(), d)
	assert.Zero(t, r.StartedAfterStop, "300ms after a daemon worker's stop: %v", r.Violations)
	assert.Equal(t, 300*ms, r.StopStartLag)
}

func TestCheckRunEndedThenKilledIsNoSuccess(t *testing.T) {
	// w1's run of tick 1 wrote its end at 1.2s; w1 was killed at 1.25s, before its attempt
	// ended; a rescuer recorded it interrupted; w2, still trying, took the tick over at 4.5s,
	// once the lock had expired.
	p := recorded()
	p.Retries = 1
	d := cleanRecorded()
	d.History[1].Outcome = outcome.Interrupted
	over := run(1, "w2", 4, 4500*ms, 4600*ms)
	d.Runs = append(d.Runs, over)
	d.History = append(d.History, record(over, 2, outcome.Ran))
	d.Outcomes = []Outcome{{Job: "f", Replica: "w1", Tick: at(time.Second), Outcome: outcome.Interrupted}}
	tl := timeline()
	tl.add(effect{kind: workerKilled, worker: 1, node: -1, from: at(1250 * ms), to: at(2 * time.Second)})
	r := Check(p, tl, d)
	assert.True(t, r.OK(), "%v", r.Violations)
	assert.Equal(t, 1, r.EndedThenKilled)

	// Recorded ran, the attempt had ended before the kill: the tick ran twice.
	d.History[1].Outcome = outcome.Ran
	r = Check(p, tl, d)
	assert.Equal(t, 1, r.Duplicates)
	assert.Equal(t, 1, r.RunAfterSuccess)
	assert.Zero(t, r.EndedThenKilled)

	// Recorded interrupted, but its worker was not killed: the record is wrong, and the tick
	// ran twice.
	d.History[1].Outcome = outcome.Interrupted
	r = Check(p, timeline(), d)
	assert.Equal(t, 1, r.Duplicates)
}
