package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cronlock/cronlock/bench/internal/nodecost"
)

// result is one run's report.
type result struct {
	Workload   string        `json:"workload"`
	Spec       string        `json:"spec"` // job 0's
	Jobs       int           `json:"jobs"`
	Rate       int           `json:"rate_per_s,omitempty"` // -workload rate: jobs due each second
	PerInstant float64       `json:"jobs_due_per_instant"`
	Replicas   int           `json:"replicas"`
	Nodes      int           `json:"nodes"`
	Skipped    int           `json:"instants_skipped"`
	Grace      time.Duration `json:"grace_ns"`
	From       time.Time     `json:"window_from"` // the costs' window: from half a step before the first instant measured
	ledgerFigures
	ReplicaCPU float64            `json:"replica_cpu_us_per_run"`              // Σ over the replicas of their process CPU in the window
	NodeCPU    float64            `json:"node_cpu_us_per_run"`                 // Σ over the nodes of used_cpu_user + used_cpu_sys
	NodeInstr  float64            `json:"node_instructions_per_run,omitempty"` // -callgrind: Σ over the nodes
	Commands   map[string]cmdCost `json:"node_commands_per_run"`               // Σ over the nodes, INFO commandstats
	LogLines   int                `json:"replica_log_lines"`                   // lines the replicas wrote to stderr (the scheduler's logs)
	LastLog    string             `json:"last_log_line,omitempty"`
	StopErrors []string           `json:"stop_errors,omitempty"` // replicas whose Stop returned an error
	LoadBefore string             `json:"load_average_before,omitempty"`
	LoadAfter  string             `json:"load_average_after,omitempty"`
}

// cmdCost is one command's calls and time on the nodes per run, summed over the nodes.
type cmdCost struct {
	Calls float64 `json:"calls"`
	Us    float64 `json:"us"`
}

// report is what the command prints with -json.
type report struct {
	Runs        []result `json:"results"`
	P99Limit    float64  `json:"p99_limit_ms,omitempty"`             // -workload rate
	HighestRate int      `json:"highest_rate_per_s,omitempty"`       // -workload rate: the highest that passed
	LowestFail  int      `json:"lowest_failed_rate_per_s,omitempty"` // -workload rate: the lowest that did not
}

// summarize fills in r from the replicas' results outs, the nodes' counters d and
// instructions instr over the window w of a run of cfg.
func (r *result) summarize(cfg config, w window, outs []replicaResult, d nodecost.Stats, instr int64) error {
	p := cfg.plan()
	due, err := dueTicks(p.jobs, p.spec, w.instants[0], w.instants[len(w.instants)-1])
	if err != nil {
		return err
	}
	var runs []run
	var cpu int64
	for _, o := range outs {
		runs = append(runs, o.Runs...)
		cpu += o.CPUus
		if o.StopError != "" {
			r.StopErrors = append(r.StopErrors, o.StopError)
		}
	}
	r.Workload, r.Spec, r.Jobs, r.Replicas, r.Nodes = p.workload, p.spec(0), p.jobs, cfg.replicas, cfg.nodes
	r.PerInstant = float64(p.jobs) / float64(p.instantsPerPeriod())
	r.Skipped, r.Grace, r.From = cfg.skip, cfg.grace, w.from
	r.ledgerFigures = account(due, runs)
	r.Commands = map[string]cmdCost{}
	if r.Runs == 0 {
		return nil
	}
	per := float64(r.Runs)
	r.ReplicaCPU, r.NodeCPU, r.NodeInstr = float64(cpu)/per, d.CPUus/per, float64(instr)/per
	for cmd, c := range d.Commands {
		r.Commands[cmd] = cmdCost{Calls: float64(c.Calls) / per, Us: float64(c.Usec) / per}
	}
	return nil
}

// passes reports whether r is within limit: p99 at most limit, every tick run once.
func (r result) passes(limit time.Duration) bool {
	return r.Runs > 0 && r.P99 <= ms(limit) && r.Missed == 0 && r.Duplicates == 0 && r.Unexpected == 0
}

// maxTrials bounds the runs of a rate search.
const maxTrials = 12

// searchRate runs the spread workload at rates (jobs due each second) from start, doubling
// while the runs pass (p99 ≤ limit, nothing missed or run twice), then halving the gap between
// the highest rate that passed and the lowest that failed until it is within a tenth of the
// former. Every trial is a run of its own: fresh nodes, fresh replicas.
func searchRate(ctx context.Context, self string, cfg config, start int, limit time.Duration, print func(result)) (report, error) {
	rep := report{P99Limit: ms(limit)}
	if start < 1 {
		return rep, fmt.Errorf("-rate-start %d: give at least 1 job due each second", start)
	}
	if cfg.callgrind {
		return rep, fmt.Errorf("-callgrind with -workload rate: the nodes under callgrind are many times slower, so the rate found would be callgrind's")
	}
	lo, hi := 0, 0 // the highest rate that passed, the lowest that failed
	for rate := start; len(rep.Runs) < maxTrials; {
		c := cfg
		c.workload, c.jobs = workloadSpread, rate*cfg.period
		r, err := measure(ctx, self, c.withDefaults())
		if err != nil {
			return rep, fmt.Errorf("rate %d/s: %w", rate, err)
		}
		r.Rate = rate
		rep.Runs = append(rep.Runs, r)
		if print != nil {
			print(r)
		}
		if r.passes(limit) {
			lo = rate
		} else {
			hi = rate
		}
		switch {
		case hi == 0:
			rate *= 2
		case hi-lo <= max(lo/10, 1):
			rep.HighestRate, rep.LowestFail = lo, hi
			return rep, nil
		case lo == 0:
			rate /= 2
		default:
			rate = (lo + hi) / 2
		}
	}
	rep.HighestRate, rep.LowestFail = lo, hi
	return rep, nil
}

// printResult prints one run as a table row with its instants and commands.
func printResult(r result) {
	fmt.Println()
	what := fmt.Sprintf("%d jobs, every one on %q: all due at each instant", r.Jobs, r.Spec)
	if r.Workload == workloadSpread {
		what = fmt.Sprintf("%d jobs, job i on second i%%period (job 0: %q): %.0f due each second", r.Jobs, r.Spec, r.PerInstant)
	}
	fmt.Printf("# %s, %s; %d replica processes, %d nodes\n", r.Workload, what, r.Replicas, r.Nodes)
	fmt.Printf("# %d instants skipped, %d measured from %s, grace %v; load average %s → %s\n",
		r.Skipped, len(r.Instants), r.From.UTC().Format(time.RFC3339), r.Grace, r.LoadBefore, r.LoadAfter)
	instr := r.NodeInstr > 0
	fmt.Printf("%7s %7s %7s %6s %4s %4s %9s %9s %9s %17s %9s %9s%s\n", "jobs", "ticks", "runs", "missed", "dup", "unex",
		"p50-ms", "p99-ms", "max-ms", "instants-p99-ms", "repl-cpu", "node-cpu", instrHeader(instr))
	spread := "-"
	if len(r.Instants) > 0 {
		lo, hi := r.Instants[0].P99, r.Instants[0].P99
		for _, in := range r.Instants {
			lo, hi = min(lo, in.P99), max(hi, in.P99)
		}
		spread = fmt.Sprintf("%.1f–%.1f", lo, hi)
	}
	fmt.Printf("%7d %7d %7d %6d %4d %4d %9.1f %9.1f %9.1f %17s %9.1f %9.1f%s\n", r.Jobs, r.Ticks, r.Runs, r.Missed, r.Duplicates, r.Unexpected,
		r.P50, r.P99, r.Max, spread, r.ReplicaCPU, r.NodeCPU, instrColumn(instr, r.NodeInstr))
	if len(r.Instants) <= 5 {
		for _, in := range r.Instants {
			fmt.Printf("    instant %s: %d due, %d runs, p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
				in.Tick.Format("15:04:05"), in.Due, in.Runs, in.P50, in.P99, in.Max)
		}
	}
	for _, cmd := range slices.Sorted(maps.Keys(r.Commands)) {
		c := r.Commands[cmd]
		fmt.Printf("    %-14s %8.3f calls %8.2f µs per run on the nodes\n", cmd, c.Calls, c.Us)
	}
	if r.LogLines > 0 {
		fmt.Printf("    the replicas logged %d lines; the last: %s\n", r.LogLines, r.LastLog)
	}
	for _, e := range r.StopErrors {
		fmt.Printf("    a replica's Stop: %s\n", e)
	}
}

func instrHeader(on bool) string {
	if !on {
		return ""
	}
	return fmt.Sprintf(" %9s", "node-Ir")
}

func instrColumn(on bool, v float64) string {
	if !on {
		return ""
	}
	return fmt.Sprintf(" %9.0f", v)
}

// printRate prints a rate search's outcome.
func printRate(rep report) {
	fmt.Println()
	var trials []string
	for _, r := range rep.Runs {
		trials = append(trials, fmt.Sprintf("%d/s p99 %.0f ms", r.Rate, r.P99))
	}
	fmt.Printf("# trials: %s\n", strings.Join(trials, "; "))
	if rep.HighestRate == 0 {
		fmt.Printf("# no rate tried had p99 ≤ %.0f ms with every tick run once\n", rep.P99Limit)
		return
	}
	fmt.Printf("# highest rate with p99 ≤ %.0f ms and every tick run once: %d jobs due each second", rep.P99Limit, rep.HighestRate)
	if rep.LowestFail > 0 {
		fmt.Printf(" (%d/s did not pass)", rep.LowestFail)
	}
	fmt.Println()
}
