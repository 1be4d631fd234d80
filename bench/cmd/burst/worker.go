package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// workerFlag, as the first argument, makes the command a replica: the parent starts R of them.
const workerFlag = "-worker"

// stopTimeout bounds a replica's Stop.
const stopTimeout = 30 * time.Second

// The signals the parent sends a replica: the start and the end of the measured window (the
// replica reads its CPU time at each), then stop.
var (
	sigFrom = syscall.SIGUSR1
	sigTo   = syscall.SIGUSR2
	sigStop = syscall.SIGTERM
)

// replicaResult is what a replica writes to its result file once stopped.
type replicaResult struct {
	// CPUus is the replica's process CPU (user + system, getrusage RUSAGE_SELF) between the
	// window's start and end signals, in µs; Window says both came, in that order.
	CPUus     int64  `json:"cpu_us"`
	Window    bool   `json:"window"`
	StopError string `json:"stop_error,omitempty"`
	Runs      []run  `json:"runs"`
}

// ledger is a replica's record of its runs, preallocated so that a burst does not grow it.
type ledger struct {
	mu   sync.Mutex
	runs []run
}

// handler is job i's func: it records the run and returns.
func (l *ledger) handler(i int) job.Handler {
	return func(ctx context.Context) error {
		start := time.Now().UnixNano()
		r, _ := job.RunFrom(ctx)
		l.mu.Lock()
		l.runs = append(l.runs, run{Job: i, Tick: r.Tick.UnixNano(), Start: start})
		l.mu.Unlock()
		return nil
	}
}

func (l *ledger) snapshot() []run {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]run(nil), l.runs...)
}

// worker runs one replica: a redlock.Client over the nodes and a Scheduler with default
// options, with the workload's no-op jobs. It prints readyLine once started, reads its CPU at
// the window's signals, stops at sigStop, and writes its result file.
func worker(args []string) error {
	fs := flag.NewFlagSet("burst "+workerFlag, flag.ContinueOnError)
	nodes := fs.String("nodes", "", "the nodes' addresses, comma-separated")
	var p plan
	fs.StringVar(&p.workload, "workload", workloadBurst, "burst or spread")
	fs.IntVar(&p.jobs, "jobs", 0, "jobs")
	fs.IntVar(&p.period, "period", 0, "the jobs' period in seconds")
	capacity := fs.Int("capacity", 0, "the ledger's preallocated runs")
	out := fs.String("out", "", "the result file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := p.validate(); err != nil {
		return err
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, sigFrom, sigTo, sigStop)
	defer signal.Stop(sigs)

	locks, closeLocks, err := newLocks(strings.Split(*nodes, ","))
	if err != nil {
		return err
	}
	defer closeLocks()
	s, err := scheduler.New(locks)
	if err != nil {
		return err
	}
	l := &ledger{runs: make([]run, 0, *capacity)}
	for i := range p.jobs {
		if err := s.Add(job.Job{Name: fmt.Sprint("burst-", i), Spec: p.spec(i), Handler: l.handler(i)}); err != nil {
			return err
		}
	}
	if err := s.Start(); err != nil {
		return err
	}
	fmt.Print(readyLine)

	var res replicaResult
	var from int64 = -1
	for sig := range sigs {
		if sig == sigStop {
			break
		}
		now, err := cpuTime()
		if err != nil {
			return err
		}
		if sig == sigFrom {
			from = now
		} else if from >= 0 {
			res.CPUus, res.Window = now-from, true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		res.StopError = err.Error()
	}
	res.Runs = l.snapshot()
	data, err := json.Marshal(res)
	if err != nil {
		return err
	}
	return os.WriteFile(*out, data, 0o644)
}

// newNodeClient is a go-redis client of one node, as cmd/pair gives the libraries: context
// deadlines enforced, no hidden retries.
func newNodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
}

// newLocks returns a lock client over one go-redis client per node address, and the func that
// closes it and them.
func newLocks(addrs []string) (*redlock.Client, func(), error) {
	rcs := make([]*redis.Client, len(addrs))
	rn := make([]redlock.Node, len(addrs))
	for i, a := range addrs {
		rcs[i] = newNodeClient(a)
		rn[i] = rcs[i]
	}
	closeNodes := func() {
		for _, rc := range rcs {
			_ = rc.Close()
		}
	}
	locks, err := redlock.New(rn)
	if err != nil {
		closeNodes()
		return nil, nil, err
	}
	return locks, func() {
		_ = locks.Close()
		closeNodes()
	}, nil
}

// cpuTime is the process's user + system CPU time in µs.
func cpuTime() (int64, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, fmt.Errorf("getrusage: %w", err)
	}
	return (ru.Utime.Nano() + ru.Stime.Nano()) / 1e3, nil
}
