package main

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/cronlock/cronlock/scheduler"
)

// run is one entry of a replica's ledger: the job's index, the tick it ran for and when the
// job's func started, both in Unix nanoseconds of the wall clock.
type run struct {
	Job   int   `json:"j"`
	Tick  int64 `json:"t"`
	Start int64 `json:"s"`
}

// tick is one tick of one job, in Unix nanoseconds.
type tick struct {
	job int
	at  int64
}

// instantFigures are the start lateness of the runs of one instant's ticks.
type instantFigures struct {
	Tick time.Time `json:"tick"`
	Due  int       `json:"due"`  // ticks due at the instant
	Runs int       `json:"runs"` // runs of them, on every replica
	P50  float64   `json:"p50_ms"`
	P99  float64   `json:"p99_ms"`
	Max  float64   `json:"max_ms"`
}

// ledgerFigures are what the replicas' ledgers say of the ticks measured.
type ledgerFigures struct {
	Ticks      int              `json:"ticks"`      // ticks due at the measured instants
	Runs       int              `json:"runs"`       // runs of those ticks, on every replica
	Missed     int              `json:"missed"`     // ticks that no replica ran
	Duplicates int              `json:"duplicates"` // runs of a tick after its first
	Unexpected int              `json:"unexpected"` // runs, between the first and the last instant, of a tick no spec gives
	P50        float64          `json:"p50_ms"`     // start lateness (job func start − tick) of every run of the ticks
	P99        float64          `json:"p99_ms"`
	Max        float64          `json:"max_ms"`
	Instants   []instantFigures `json:"instants"`
}

// account checks every replica's runs against the ticks due at the measured instants, and
// measures the start lateness of the runs of those ticks. Runs of other ticks (before the
// first instant or after the last) are left out; a run of a tick between them that is not
// due counts as unexpected.
func account(due []tick, runs []run) ledgerFigures {
	var f ledgerFigures
	if len(due) == 0 {
		return f
	}
	count := make(map[tick]int, len(due))
	perInstant := map[int64]int{}
	first, last := due[0].at, due[0].at
	for _, t := range due {
		count[t] = 0
		perInstant[t.at]++
		first, last = min(first, t.at), max(last, t.at)
	}
	var all []time.Duration
	late := map[int64][]time.Duration{}
	for _, r := range runs {
		t := tick{r.Job, r.Tick}
		n, ok := count[t]
		if !ok {
			if r.Tick >= first && r.Tick <= last {
				f.Unexpected++
			}
			continue
		}
		count[t] = n + 1
		d := time.Duration(r.Start - r.Tick)
		all = append(all, d)
		late[r.Tick] = append(late[r.Tick], d)
	}
	f.Ticks, f.Runs = len(due), len(all)
	for _, n := range count {
		if n == 0 {
			f.Missed++
		} else {
			f.Duplicates += n - 1
		}
	}
	f.P50, f.P99, f.Max = latenesses(all)
	for at, n := range perInstant {
		in := instantFigures{Tick: time.Unix(0, at).UTC(), Due: n, Runs: len(late[at])}
		in.P50, in.P99, in.Max = latenesses(late[at])
		f.Instants = append(f.Instants, in)
	}
	slices.SortFunc(f.Instants, func(a, b instantFigures) int { return a.Tick.Compare(b.Tick) })
	return f
}

// latenesses sorts d and returns its p50, p99 and maximum in milliseconds.
func latenesses(d []time.Duration) (p50, p99, maxMs float64) {
	slices.Sort(d)
	return ms(percentile(d, 0.50)), ms(percentile(d, 0.99)), ms(percentile(d, 1))
}

// percentile is the nearest-rank percentile of sorted: the smallest value at least a fraction
// q of the values are not above. It is 0 for no values.
func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[max(int(math.Ceil(q*float64(len(sorted))))-1, 0)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// dueTicks returns the ticks of jobs jobs, job i on spec(i), in [first, last], as the
// scheduler computes them (scheduler.ParseSpec, in UTC).
func dueTicks(jobs int, spec func(i int) string, first, last time.Time) ([]tick, error) {
	type sched interface{ Next(time.Time) time.Time }
	parsed := map[string]sched{}
	var due []tick
	for i := range jobs {
		sp := spec(i)
		s, ok := parsed[sp]
		if !ok {
			p, err := scheduler.ParseSpec(sp, time.UTC)
			if err != nil {
				return nil, fmt.Errorf("job %d: %w", i, err)
			}
			s, parsed[sp] = p, p
		}
		for t := s.Next(first.Add(-time.Nanosecond)); !t.After(last); t = s.Next(t) {
			due = append(due, tick{i, t.UnixNano()})
		}
	}
	return due, nil
}
