package scheduler_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// localNodes starts n throwaway redis-server processes and returns their addresses, with a
// func that stops them.
func localNodes(n int) ([]string, func()) {
	var addrs []string
	var servers []*redistest.Server
	for range n {
		s, err := redistest.New(redistest.Config{})
		if err != nil {
			panic(err)
		}
		servers = append(servers, s)
		addrs = append(addrs, s.Addr())
	}
	return addrs, func() {
		for _, s := range servers {
			s.Close()
		}
	}
}

// lockClient returns a redlock client over the nodes, as one replica has it.
func lockClient(addrs []string) (*redlock.Client, func()) {
	var nodes []redlock.Node
	for _, a := range addrs {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true}))
	}
	c, err := redlock.New(nodes)
	if err != nil {
		panic(err)
	}
	return c, func() {
		c.Close()
		for _, n := range nodes {
			n.(*redis.Client).Close()
		}
	}
}

// Three replicas of a worker run the same job; each tick runs on one of them. (A fake clock
// makes the output deterministic; in production, leave WithClock out.)
func Example() {
	addrs, stop := localNodes(3)
	defer stop()
	clock := clocktest.NewFake(time.Date(2025, 1, 1, 8, 59, 59, 0, time.UTC))

	var mu sync.Mutex
	var outcomes []string
	record := func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			err := next(ctx)
			mu.Lock()
			outcomes = append(outcomes, middleware.Outcome(err))
			mu.Unlock()
			return err
		}
	}
	runs := make(chan *job.Run, 3)
	var scheds []*scheduler.Scheduler
	for i := range 3 {
		locks, closeLocks := lockClient(addrs)
		defer closeLocks()
		if i == 0 {
			_ = locks.EndQuarantine(context.Background()) // new nodes: nothing was forgotten
		}
		s, err := scheduler.New(locks, scheduler.WithReplica(fmt.Sprint("worker-", i)),
			scheduler.WithClock(clock), scheduler.WithMiddleware(record))
		if err != nil {
			panic(err)
		}
		err = s.Add(job.Job{Name: "report", Spec: "0 9 * * *", Handler: func(ctx context.Context) error {
			run, _ := job.RunFrom(ctx)
			runs <- run
			return nil
		}})
		if err != nil {
			panic(err)
		}
		if err := s.Start(); err != nil {
			panic(err)
		}
		scheds = append(scheds, s)
	}

	_ = clock.BlockUntil(context.Background(), 3) // the three loops wait for 09:00
	clock.Advance(time.Second)
	run := <-runs
	fmt.Println("ran tick", run.Tick.Format(time.TimeOnly))
	for _, s := range scheds {
		_ = s.Stop(context.Background())
	}
	// One replica ran it; the others skipped it: held by the runner, or already done when they
	// got there.
	ran := 0
	for _, o := range outcomes {
		if o == "ran" {
			ran++
		}
	}
	fmt.Println(len(outcomes), "outcomes,", ran, "ran")
	// Output:
	// ran tick 09:00:00
	// 3 outcomes, 1 ran
}

func ExampleParseSpec() {
	ny, _ := time.LoadLocation("America/New_York")
	s, _ := scheduler.ParseSpec("30 2 * * *", ny)
	// Clocks go from 02:00 to 03:00 on 10 March 2024: 02:30 runs at the transition.
	t := s.Next(time.Date(2024, 3, 9, 12, 0, 0, 0, ny))
	fmt.Println(t.Format("Jan 2 15:04 MST"), "then", s.Next(t).Format("Jan 2 15:04 MST"))

	every, _ := scheduler.ParseSpec("@every 90s", nil)
	fmt.Println(every.Next(time.Date(2025, 1, 1, 0, 0, 1, 0, time.UTC)).Format(time.TimeOnly))
	// Output:
	// Mar 10 03:00 EDT then Mar 11 02:30 EDT
	// 00:01:30
}

func ExampleScheduler_Add() {
	addrs, stop := localNodes(1)
	defer stop()
	locks, closeLocks := lockClient(addrs)
	defer closeLocks()
	s, _ := scheduler.New(locks)
	err := s.Add(job.Job{Name: "cleanup", Spec: "0 60 * * *", Handler: func(context.Context) error { return nil }})
	fmt.Println(err)
	// Output:
	// job "cleanup": Spec: "0 60 * * *": field 2 (hour) "60": end of range (60) above maximum (23); e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"
}
