package scheduler

import (
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/job"
)

// deadline returns the end of tick's window, job.Run.Deadline: the next tick, or the tick
// plus the tick retention minus twice the max clock skew if that is earlier.
func (s *Scheduler) deadline(e *entry, tick, next time.Time) time.Time {
	deadline := tick.Add(e.keepDone - 2*s.cfg.maxSkew)
	if !next.IsZero() && next.Before(deadline) {
		deadline = next
	}
	return deadline
}

// startOf returns when tick of e starts: tick plus its jitter delay (zero for the zero time).
// The delay is below the tick's window, so a tick always starts before the next one.
func (s *Scheduler) startOf(e *entry, tick time.Time) time.Time {
	if e.job.Jitter <= 0 || tick.IsZero() {
		return tick
	}
	window := s.deadline(e, tick, e.sched.Next(tick)).Sub(tick)
	return tick.Add(tickmath.JitterDelay(e.job.Name, tick, min(e.job.Jitter, window)))
}

// checkJitter refuses a Jitter of j that is not shorter than the shortest time between two
// of its ticks after now: a tick must start before the next one. (The tick retention is raised to fit
// the Jitter: see prepare.)
func checkJitter(j job.Job, schedule string, sched cron.Schedule, now time.Time) error {
	if j.Jitter <= 0 {
		return nil
	}
	if gap := tickmath.ShortestGap(sched, now); j.Jitter >= gap {
		return &job.InvalidError{Job: j.Name, Field: "Options.Jitter", Problem: fmt.Sprintf(
			"%v is not shorter than the %v between ticks of %q: a tick must start before the next one; give a jitter shorter than %v, or a spec whose ticks are further apart",
			j.Jitter, gap, schedule, gap)}
	}
	return nil
}
