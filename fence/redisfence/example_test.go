package redisfence_test

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/fence/redisfence"
	"github.com/cronlock/cronlock/job"
)

// A handler sets a key under its run's token; the key carries the resource's hash tag.
func ExampleSet() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	handler := func(ctx context.Context) error {
		run, _ := job.RunFrom(ctx)
		return redisfence.Set(ctx, rdb, run.Job, run.FencingToken, "{"+run.Job+"}:last-report", time.Now().Unix(), 24*time.Hour)
	}
	_ = job.Job{Name: "daily-report", Spec: "0 0 6 * * *", Handler: handler}
}

// The caller's own write under the check: its KEYS and ARGV are only its own.
func ExampleNewScript() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	addTotal := redisfence.NewScript(`redis.call('HINCRBY', KEYS[1], 'total', ARGV[1])
return redis.call('HSET', KEYS[1], 'day', ARGV[2])`)
	handler := func(ctx context.Context) error {
		run, _ := job.RunFrom(ctx)
		_, err := addTotal.Run(ctx, rdb, run.Job, run.FencingToken, []string{"{" + run.Job + "}:totals"}, 42, run.Tick.Format(time.DateOnly))
		return err
	}
	_ = job.Job{Name: "totals", Spec: "@daily", Handler: handler}
}
