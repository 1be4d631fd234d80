// Command basic registers two jobs and runs three replicas of a worker against three Redis
// nodes: every tick of every job runs on exactly one replica.
//
//	go run ./examples/basic                                  # 3 embedded nodes (miniredis)
//	go run ./examples/basic -nodes 127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381
//
// In production each replica is its own process (one scheduler per process, same jobs, same
// nodes); here the three share a process so that one command shows the whole cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"sync"
	"time"

	"github.com/cronlock/cronlock/examples/internal/localnodes"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

func main() {
	nodes := flag.String("nodes", "", "comma-separated host:port of Redis nodes (default: 3 embedded nodes)")
	duration := flag.Duration("duration", 6*time.Second, "how long to run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Stdout, *nodes, *duration); err != nil {
		fmt.Fprintln(os.Stderr, "basic:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, nodeList string, duration time.Duration) error {
	addrs, cleanup, err := localnodes.Addrs(nodeList)
	if err != nil {
		return err
	}
	defer cleanup()

	var mu sync.Mutex
	ran := map[string]map[time.Time]string{} // job → tick → replica
	jobs := func(replica string) []job.Job {
		record := func(ctx context.Context) {
			r, _ := job.RunFrom(ctx)
			mu.Lock()
			defer mu.Unlock()
			if ran[r.Job] == nil {
				ran[r.Job] = map[time.Time]string{}
			}
			if prev, dup := ran[r.Job][r.Tick]; dup {
				fmt.Fprintf(out, "DUPLICATE %s %s on %s and %s\n", r.Job, r.Tick.Format(time.TimeOnly), prev, replica)
			}
			ran[r.Job][r.Tick] = replica
			fmt.Fprintf(out, "%-9s %-8s tick %s token %d\n", replica, r.Job, r.Tick.Format("15:04:05.000"), r.FencingToken)
		}
		return []job.Job{
			{Name: "heartbeat", Spec: "@every 500ms", Handler: func(ctx context.Context) error {
				record(ctx)
				return nil
			}},
			{Name: "report", Spec: "*/2 * * * * *", Handler: func(ctx context.Context) error { // every 2 seconds
				record(ctx)
				time.Sleep(50 * time.Millisecond) // some work
				return nil
			}},
		}
	}

	var scheds []*scheduler.Scheduler
	for i := range 3 {
		locks, closeLocks, err := localnodes.LockClient(ctx, addrs)
		if err != nil {
			return err
		}
		defer closeLocks()
		replica := fmt.Sprint("replica-", i+1)
		s, err := scheduler.New(locks, scheduler.WithReplica(replica))
		if err != nil {
			return err
		}
		for _, j := range jobs(replica) {
			if err := s.Add(j); err != nil {
				return err
			}
		}
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		if err := s.Start(); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case <-time.After(duration):
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range scheds {
		if err := s.Stop(stopCtx); err != nil {
			return err
		}
	}

	names := make([]string, 0, len(ran))
	for name := range ran {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		per := map[string]int{}
		for _, replica := range ran[name] {
			per[replica]++
		}
		fmt.Fprintf(out, "%s: %d ticks, each once (by replica: %v)\n", name, len(ran[name]), per)
	}
	return nil
}
