package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config configures one chaos run.
type Config struct {
	Seed     uint64
	Duration time.Duration // of the fault phase
	Faults   []Class
	// Daemons is how many of the workers are daemon workers (cronlock run processes, the
	// last ones); the others are testworkers. Skew never targets a daemon worker.
	Daemons int
	// Burst is the burst set's size with the Burst class: how many jobs every worker adds,
	// all due at the same instants.
	Burst int
	// Store is the fenced store the runs write their tokens to: RedisStore (the default, "")
	// or PostgresStore.
	Store  Store
	Worker string // the testworker binary
	Daemon string // the cronlock binary, for daemon workers
	Dir    string // run directory: node data, worker logs
	Logf   func(format string, args ...any)
}

// Store is a fenced store the runs of the Forbid and Replace jobs write their tokens to.
type Store string

const (
	// RedisStore is package fencedstore's script on the ledger node, which refuses any token
	// not above the last one and logs its answers to lists on that node.
	RedisStore Store = "redis"
	// PostgresStore is package pgfence's check on a Postgres server the harness starts
	// (internal/pgtest): the store itself refuses a stale write, and logs the writes it
	// accepted in the transaction that passed the check (fencedstore.WritePostgres; the daemon
	// workers' runs use psql).
	PostgresStore Store = "postgres"
)

// ParseStore parses the name of a fenced store: redis or postgres.
func ParseStore(s string) (Store, error) {
	switch st := Store(s); st {
	case RedisStore, PostgresStore:
		return st, nil
	}
	return "", fmt.Errorf("fenced store %q is unknown: use redis or postgres", s)
}

// Report is the outcome of a run: the checker's result, the faults applied, and what the
// harness itself found wrong (workers that did not exit cleanly, locks or processes left).
type Report struct {
	Config   Config
	Result   *Result
	Episodes map[Class]int
	Problems []string
	// DaemonRuns counts the daemon workers' runs; DaemonRunsStopped those stopped before the
	// end of their work (their daemon killed, or their lease lost).
	DaemonRuns, DaemonRunsStopped int
	// Stalls counts the harness's pings to a node that failed or took longer than half the
	// node timeout with no fault on it, Stalled their time in all: how much the host stalled
	// (see stallProbe). The checker counts a node as lost to every worker meanwhile.
	Stalls  int
	Stalled time.Duration
}

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool { return r.Result != nil && r.Result.OK() && len(r.Problems) == 0 }

// ReplayCommand returns the make command that runs cfg again.
func ReplayCommand(cfg Config) string {
	var faults []string
	for _, c := range cfg.Faults {
		faults = append(faults, string(c))
	}
	f := "all"
	if !slices.Equal(cfg.Faults, Classes) {
		f = strings.Join(faults, ",")
	}
	cmd := "make chaos DURATION=" + cfg.Duration.String() + " SEED=" + strconv.FormatUint(cfg.Seed, 10) + " FAULTS=" + f +
		" DAEMONS=" + strconv.Itoa(cfg.Daemons)
	if slices.Contains(cfg.Faults, Burst) {
		cmd += " BURST=" + strconv.Itoa(cfg.Burst)
	}
	if cfg.Store == PostgresStore {
		cmd += " FENCE=postgres"
	}
	return cmd
}

// Summary describes the run for a log: the faults applied, the checker's counts, and the
// report's table row.
func (r *Report) Summary() string {
	var b strings.Builder
	res := r.Result
	fmt.Fprintf(&b, "replay: %s\n", ReplayCommand(r.Config))
	fmt.Fprintf(&b, "faults applied: %s\n", r.episodes())
	fmt.Fprintf(&b, "ticks %d, ran %d, runs %d; duplicates %d, run again after a success %d, more runs than retries+1 %d, successes not reported ran %d, overlaps %d (after a node clock step, outside the assumptions: %d), stale writes accepted %d (refused %d, accepted %d), fencing broken %d\n",
		res.Ticks, res.Ran, res.Runs, res.Duplicates, res.RunAfterSuccess, res.TooManyRuns, res.SuccessNotRan, res.Overlaps, res.ClockStepOverlaps, res.StaleAccepted, res.Refused, res.Accepted, res.FencingBroken)
	fmt.Fprintf(&b, "replaced runs %d, runs started before the run they replaced returned %d\n", res.Replaced, res.ReplacedOverlaps)
	fmt.Fprintf(&b, "missed: %s; unexplained %d\n", counts(res.Missed), res.Unexplained)
	fmt.Fprintf(&b, "leases lost %d (unexplained %d), runs killed %d, ended then killed before their attempt ended (recorded interrupted, not successes) %d, unfinished %d, started without quorum %d, outlived their daemon %d\n",
		res.LeasesLost, res.LeasesLostUnexplained, res.Killed, res.EndedThenKilled, res.Unfinished, res.StartedWithoutQuorum, res.Orphans)
	fmt.Fprintf(&b, "history records %d (interrupted %d); attempts recorded twice %d, runs without a record %d (killed before their in-flight record reached a quorum, not counted: %d), killed runs not recorded interrupted %d\n",
		res.Records, res.Interrupted, res.AttemptRecordedTwice, res.NoRecord, res.KilledBeforeInFlight, res.KilledNotInterrupted)
	fmt.Fprintf(&b, "outcomes: %s; skipped_overlap while no run held the job's locks %d\n", counts(res.Outcomes), res.IdleOverlapSkips)
	fmt.Fprintf(&b, "daemon workers' runs %d, stopped before the end of their work %d\n", r.DaemonRuns, r.DaemonRunsStopped)
	fmt.Fprintf(&b, "runs started after their worker began to stop %d (latest start within the slack: %v)\n", res.StartedAfterStop, res.StopStartLag.Round(time.Millisecond))
	if res.BurstTicks > 0 {
		fmt.Fprintf(&b, "burst set: ticks %d, ran %d; lateness of the first run %s\n", res.BurstTicks, res.BurstRan, res.BurstLateness)
	}
	fmt.Fprintf(&b, "host stalls (a node slow to answer the harness with no fault on it) %d, %v in all\n", r.Stalls, r.Stalled.Round(time.Millisecond))
	fmt.Fprintf(&b, "harness problems (leaks, unclean exits): %d\n", len(r.Problems))
	fmt.Fprintf(&b, "row: %s\n", r.Row())
	return b.String()
}

// Row is the run's row in docs/reliability.md's table.
func (r *Report) Row() string {
	res := r.Result
	missed := 0
	for _, n := range res.Missed {
		missed += n
	}
	return fmt.Sprintf("| %s | %s | %d | %d | %d | %d | %d | %d | %d of %d | %d | %d (%d) | %d | `%s` |",
		r.faults(), r.episodes(), res.Runs, res.Ticks, res.Duplicates, res.Overlaps, res.StaleAccepted, res.Refused,
		missed, missed+res.Unexplained, res.Unexplained, res.LeasesLost, res.LeasesLostUnexplained, len(r.Problems), ReplayCommand(r.Config))
}

func (r *Report) faults() string {
	if slices.Equal(r.Config.Faults, Classes) {
		return "all"
	}
	var out []string
	for _, c := range r.Config.Faults {
		out = append(out, string(c))
	}
	return strings.Join(out, ", ")
}

func (r *Report) episodes() string {
	var out []string
	for _, c := range Classes {
		if n := r.Episodes[c]; n > 0 {
			out = append(out, fmt.Sprintf("%s %d", c, n))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func counts(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var out []string
	for _, k := range keys {
		out = append(out, fmt.Sprintf("%s %d", k, m[k]))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
