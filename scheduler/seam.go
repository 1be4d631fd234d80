package scheduler

import (
	"time"

	"go.opentelemetry.io/otel/metric"

	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// The parts of the scheduler that only cronlock's own packages use (package schedseam).
func init() {
	schedseam.ResolveSpec = resolveSpec
	schedseam.CheckJob = func(locks *redlock.Client, j job.Job) error {
		_, err := checkJob(locks, time.UTC, time.Now(), j)
		return err
	}
	schedseam.RegisterGauges = func(s any, mp metric.MeterProvider) (metric.Registration, error) {
		return s.(*Scheduler).registerGauges(mp)
	}
	schedseam.SetConfigHash = func(s any, h string) { s.(*Scheduler).setConfigHash(h) }
	schedseam.WithTriggerPoll = func(d time.Duration) any { return withTriggerPoll(d) }
	schedseam.WithRescueEvery = func(d time.Duration) any { return withRescueEvery(d) }
	schedseam.WithHeartbeat = func(d time.Duration) any { return withHeartbeat(d) }
	schedseam.WithVersion = func(v string) any { return withVersion(v) }
	schedseam.RunsLeft = runsLeft
}
