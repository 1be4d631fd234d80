// Command burst measures cronlock's scheduler when many jobs are due at once, the way a user
// runs it: each replica is a process of its own, built with the public API only — a
// redlock.Client over go-redis clients of the nodes and a scheduler.Scheduler with default
// options — and the figures are taken from outside.
//
//	go build -o burst ./cmd/burst && ./burst   # in bench/: 10,000 jobs on */10, 3 replicas, 3 nodes
//	./burst -workload spread                   # job i on second i%10 of */10: 1,000 due each second
//	./burst -workload rate                     # the highest rate due each second with p99 ≤ 250ms
//	./burst -jobs 500 -callgrind               # the nodes under callgrind: instructions per run
//
// A run starts fresh redis-servers on 127.0.0.1 (ending their quarantine, as for new empty
// nodes), then the replicas: the command itself, re-executed with a worker flag. Every
// replica adds the same no-op jobs; a job's func appends (job, tick, start time) to the
// replica's ledger and returns. The replicas exchange nothing. The parent skips the first
// instants after every replica started, measures the next ones, waits a grace period for late
// runs, stops the replicas (SIGTERM: Stop) and reads their ledgers. Per run it reports the
// start lateness (job func start − tick) of the runs of the measured ticks, the ticks no
// replica ran (missed) and the runs of a tick after its first (duplicates), and costs per
// run: the replicas' process CPU, the nodes' process CPU and commands (INFO), and with
// -callgrind the instructions the nodes executed.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

// The workloads.
const (
	workloadBurst  = "burst"  // every job on */period: all due at one instant every period
	workloadSpread = "spread" // job i on second i%period of */period: jobs/period due each second
	workloadRate   = "rate"   // spread runs at increasing rates, for the highest with p99 within a limit
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		if err := worker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "burst replica:", err)
			os.Exit(1)
		}
		return
	}
	var cfg config
	flag.StringVar(&cfg.workload, "workload", workloadBurst, "burst: every job on */period; spread: job i on second i%period of */period; rate: spread runs at increasing rates")
	flag.IntVar(&cfg.jobs, "jobs", 10000, "jobs (each replica adds them all); not with -workload rate")
	flag.IntVar(&cfg.replicas, "replicas", 3, "replica processes")
	flag.IntVar(&cfg.nodes, "nodes", 3, "lock nodes (redis-servers)")
	flag.IntVar(&cfg.period, "period", 10, "the jobs' period in seconds (the spec's */period), a divisor of 60")
	flag.IntVar(&cfg.skip, "skip", 0, "instants skipped after every replica started (default: one period's)")
	flag.IntVar(&cfg.instants, "instants", 0, "instants measured (default: three periods': 3 for burst, 30 for spread and rate at -period 10)")
	flag.DurationVar(&cfg.grace, "grace", 0, "how long after the last instant measured a run still counts (default: one period); a tick not run by then is missed")
	flag.BoolVar(&cfg.callgrind, "callgrind", false, "run the nodes under valgrind's callgrind and report the instructions they executed per run")
	flag.StringVar(&cfg.logs, "logs", "", "copy each run's replica logs (their stderr: the scheduler's warnings) to this directory, as <workload>-<jobs>-<window start>-replica-<i>.log")
	rateStart := flag.Int("rate-start", 250, "with -workload rate: the first rate tried, in jobs due each second")
	limit := flag.Duration("p99-limit", 250*time.Millisecond, "with -workload rate: the p99 start lateness a rate must not exceed")
	asJSON := flag.Bool("json", false, "print the results as JSON instead of tables")
	flag.Parse()

	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	err := runMain(ctx, cfg, *rateStart, *limit, *asJSON)
	if err != nil {
		fmt.Fprintln(os.Stderr, "burst:", err)
		os.Exit(1)
	}
}

// runMain runs the workload and prints the report.
func runMain(ctx context.Context, cfg config, rateStart int, limit time.Duration, asJSON bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	jobsSet := false
	flag.Visit(func(f *flag.Flag) { jobsSet = jobsSet || f.Name == "jobs" })
	var rep report
	var print func(result)
	if !asJSON {
		fmt.Printf("# %s, GOMAXPROCS %d; lateness = job func start − tick, over every run of the ticks measured; costs per run\n", runtime.Version(), runtime.GOMAXPROCS(0))
		print = printResult
	}
	if cfg.workload == workloadRate {
		if jobsSet {
			return errors.New("-jobs with -workload rate: the trials choose the jobs (rate × period); give -rate-start")
		}
		rep, err = searchRate(ctx, self, cfg, rateStart, limit, print)
	} else {
		var r result
		if r, err = measure(ctx, self, cfg.withDefaults()); err == nil {
			rep.Runs = append(rep.Runs, r)
			if print != nil {
				print(r)
			}
		}
	}
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	if cfg.workload == workloadRate {
		printRate(rep)
	}
	return nil
}
