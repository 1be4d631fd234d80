package scheduler

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"

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
	return tick.Add(JitterDelay(e.job.Name, tick, min(e.job.Jitter, window)))
}

// JitterDelay returns the delay of tick of the job named name under Options.Jitter jitter: a
// hash of the name and the tick's instant (in Unix milliseconds, as in its lock key) mapped
// into [0, jitter), in whole milliseconds (as ticks are: the planned start is as exact in
// a span's or history record's milliseconds as in Go). It depends on nothing else, so every
// replica, and every release of cronlock, computes the same delay. Zero when jitter is under
// 1ms. The scheduler bounds jitter by the
// tick's window first, which matters only for a tick closer to the next one than Jitter (a
// daylight saving time change): its delay is then within that window.
func JitterDelay(name string, tick time.Time, jitter time.Duration) time.Duration {
	ms := uint64(jitter / time.Millisecond)
	if ms == 0 {
		return 0
	}
	return time.Duration(hash64(name, strconv.FormatInt(tick.UnixMilli(), 10))%ms) * time.Millisecond
}

// checkJitter refuses a Jitter of j that is not shorter than the shortest time between two
// of its ticks: a tick must start before the next one. (The tick retention is raised to fit
// the Jitter: see prepare.)
func (s *Scheduler) checkJitter(j job.Job, schedule string, sched cron.Schedule) error {
	if j.Jitter <= 0 {
		return nil
	}
	if gap := ShortestGap(sched, s.cfg.clock.Now()); j.Jitter >= gap {
		return &job.InvalidError{Job: j.Name, Field: "Options.Jitter", Problem: fmt.Sprintf(
			"%v is not shorter than the %v between ticks of %q: a tick must start before the next one; give a jitter shorter than %v, or a spec whose ticks are further apart",
			j.Jitter, gap, schedule, gap)}
	}
	return nil
}

// ShortestGap returns the shortest time between two consecutive ticks of sched among its
// next 64 ticks after from (math.MaxInt64 when it has fewer than two): the shortest gap of
// any spec whose pattern repeats within 64 ticks. A shorter gap further on (a daylight saving
// time change) bounds its own tick's delay instead (startOf).
func ShortestGap(sched cron.Schedule, from time.Time) time.Duration {
	const ticks = 64
	gap := time.Duration(math.MaxInt64)
	t := sched.Next(from)
	for range ticks {
		next := sched.Next(t)
		if next.IsZero() {
			break
		}
		gap = min(gap, next.Sub(t))
		t = next
	}
	return gap
}
