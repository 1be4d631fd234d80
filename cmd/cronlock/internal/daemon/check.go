package daemon

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// parseSchedule resolves the H of a job's spec from its name and parses the result, as the
// scheduler does (in UTC, its default location): the spec resolved (spec itself when it has
// no H, or when resolving fails) and its schedule.
func parseSchedule(name, spec string) (string, cron.Schedule, error) {
	resolved, err := schedseam.ResolveSpec(spec, name)
	if err != nil {
		return spec, nil, err
	}
	sched, err := scheduler.ParseSpec(resolved, time.UTC)
	return resolved, sched, err
}

// checkJob checks j, a job of the config that buildJob built, as the scheduler's Add checks it,
// without a scheduler: job.Job.Validate; its spec, resolved and parsed; its lock TTL, which the
// lock client must accept (above its drift allowance and node timeout, up to max_ttl); and its
// jitter, which must be shorter than the time between its ticks. Its errors are Add's, for
// config.JobError to name the key. Add's other checks are config.Load's too: a spec that never
// fires, and a name given twice, are refused there with the line of the key.
//
// The jitter's rule and problem are copied from the scheduler's (its checkJitter is
// unexported): TestCheckJobIsAdd fails if they part.
func checkJob(locks *redlock.Client, j job.Job) error {
	if err := j.Validate(); err != nil {
		return err
	}
	resolved, sched, err := parseSchedule(j.Name, j.Spec)
	if err != nil {
		return &job.InvalidError{Job: j.Name, Field: "Spec", Problem: err.Error(), Err: err}
	}
	if err := lockseam.CheckTTL(locks, j.Options.WithDefaults().LockTTL); err != nil {
		return &job.InvalidError{Job: j.Name, Field: "Options.LockTTL", Problem: err.Error(), Err: err}
	}
	if j.Jitter <= 0 {
		return nil
	}
	if gap := tickmath.ShortestGap(sched, time.Now()); j.Jitter >= gap {
		return &job.InvalidError{Job: j.Name, Field: "Options.Jitter", Problem: fmt.Sprintf(
			"%v is not shorter than the %v between ticks of %q: a tick must start before the next one; give a jitter shorter than %v, or a spec whose ticks are further apart",
			j.Jitter, gap, resolved, gap)}
	}
	return nil
}
