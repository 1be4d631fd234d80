// Command quickstart is the README's quick start, whole: a worker with one job. Run it on
// every replica, over the same Redis nodes: each tick of the job runs on one replica only.
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}); err != nil {
		log.Fatal(err)
	}
}

// run runs the worker over the Redis nodes at addrs until ctx ends.
func run(ctx context.Context, addrs []string) error {
	var nodes []redlock.Node // the same independent Redis nodes on every replica
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1})
		defer c.Close()
		nodes = append(nodes, c)
	}
	locks, err := redlock.New(nodes)
	if err != nil {
		return err
	}
	defer locks.Close()
	hostname, _ := os.Hostname()
	s, err := scheduler.New(locks, scheduler.WithReplica(hostname))
	if err != nil {
		return err
	}
	err = s.Add(job.Job{
		Name: "daily-report",
		Spec: "0 0 6 * * *", // seconds first: every day at 06:00:00 (WithLocation: the zone, default UTC)
		Options: job.Options{
			Retries: 2,          // a failed run is tried again, 3 runs in all, on any replica
			Overlap: job.Forbid, // the default: no run starts while one runs anywhere
		},
		Handler: func(ctx context.Context) error {
			run, _ := job.RunFrom(ctx) // tick, attempt, fencing token, replica
			return report(ctx, run.Tick, run.FencingToken)
		},
	})
	if err != nil {
		return err // names the field and the fix
	}
	if err := s.Start(); err != nil {
		return err
	}
	<-ctx.Done() // SIGINT or SIGTERM
	drain, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Stop(drain) // drains running jobs for up to 30 s, then cancels them
}

// report is the job's work; pass the token to storage that refuses older ones.
func report(ctx context.Context, tick time.Time, token uint64) error {
	log.Printf("the report of %s, fencing token %d", tick.Format(time.DateOnly), token)
	return ctx.Err()
}
