package main

import (
	"testing"
	"time"
)

// A hand-made ledger: 3 jobs due at 2 instants. Job 0 runs both ticks; job 1's first tick runs
// twice (on two replicas) and its second once; job 2's first tick runs, its second is missed.
// A run before the first instant is left out; a run of a tick no spec gives is unexpected.
func TestAccountCountsMissedAndDuplicatesAndLateness(t *testing.T) {
	const s = int64(time.Second)
	t0, t1 := 100*s, 110*s
	late := func(ms int64) int64 { return ms * int64(time.Millisecond) }
	due := []tick{{0, t0}, {1, t0}, {2, t0}, {0, t1}, {1, t1}, {2, t1}}
	runs := []run{
		{0, t0, t0 + late(10)}, {1, t0, t0 + late(20)}, {1, t0, t0 + late(30)}, {2, t0, t0 + late(40)},
		{0, t1, t1 + late(50)}, {1, t1, t1 + late(60)},
		{0, 90 * s, 90*s + late(1000)},   // before the first instant: not measured
		{2, 105 * s, 105*s + late(1000)}, // between the instants, but not due
	}
	f := account(due, runs)
	want := ledgerFigures{Ticks: 6, Runs: 6, Missed: 1, Duplicates: 1, Unexpected: 1, P50: 30, P99: 60, Max: 60}
	if f.Ticks != want.Ticks || f.Runs != want.Runs || f.Missed != want.Missed || f.Duplicates != want.Duplicates ||
		f.Unexpected != want.Unexpected || f.P50 != want.P50 || f.P99 != want.P99 || f.Max != want.Max {
		t.Errorf("account = %+v\nwant %+v", f, want)
	}
	if len(f.Instants) != 2 {
		t.Fatalf("instants: %+v, want 2", f.Instants)
	}
	in0, in1 := f.Instants[0], f.Instants[1]
	if in0.Tick.UnixNano() != t0 || in0.Due != 3 || in0.Runs != 4 || in0.P50 != 20 || in0.Max != 40 {
		t.Errorf("first instant: %+v", in0)
	}
	if in1.Tick.UnixNano() != t1 || in1.Due != 3 || in1.Runs != 2 || in1.P50 != 50 || in1.P99 != 60 {
		t.Errorf("second instant: %+v", in1)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 200; i++ {
		d = append(d, time.Duration(i))
	}
	for q, want := range map[float64]time.Duration{0.5: 100, 0.99: 198, 1: 200, 0: 1} {
		if got := percentile(d, q); got != want {
			t.Errorf("p%v of 1..200 = %v, want %v", q*100, got, want)
		}
	}
	if got := percentile(nil, 0.99); got != 0 {
		t.Errorf("p99 of nothing = %v, want 0", got)
	}
}

// dueTicks gives the ticks the scheduler computes: burst, every job at every instant; spread,
// job i at the seconds i%period of the period.
func TestDueTicks(t *testing.T) {
	first := time.Date(2026, 12, 6, 12, 0, 10, 0, time.UTC)
	last := first.Add(19 * time.Second)
	for _, c := range []struct {
		p    plan
		want map[int][]int // job → seconds past first
	}{
		{plan{workload: workloadBurst, jobs: 2, period: 10}, map[int][]int{0: {0, 10}, 1: {0, 10}}},
		{plan{workload: workloadSpread, jobs: 3, period: 10}, map[int][]int{0: {0, 10}, 1: {1, 11}, 2: {2, 12}}},
	} {
		due, err := dueTicks(c.p.jobs, c.p.spec, first, last)
		if err != nil {
			t.Fatal(err)
		}
		got := map[int][]int{}
		for _, d := range due {
			got[d.job] = append(got[d.job], int(time.Unix(0, d.at).Sub(first)/time.Second))
		}
		if len(due) != 2*c.p.jobs || len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.p.workload, got, c.want)
		}
		for j, secs := range c.want {
			if len(got[j]) != len(secs) || got[j][0] != secs[0] || got[j][1] != secs[1] {
				t.Errorf("%s: job %d at %v, want %v", c.p.workload, j, got[j], secs)
			}
		}
	}
}
