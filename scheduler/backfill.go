package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// BackfillOptions tunes Backfill. The zero value is the defaults.
type BackfillOptions struct {
	// Max is the most ticks a backfill may have: a range with more is refused before anything
	// runs. Default, and with 0: 1000.
	Max int
	// IncludePaused runs the ticks that were skipped because the job was paused then, too.
	// Default false: they are left alone, and counted in BackfillSummary.Paused.
	IncludePaused bool
	// Progress, if set, is called after each tick with the tick's outcome (middleware.Outcome's
	// name; skipped_paused for a tick left alone because the job was paused then) and the
	// counts so far, in the goroutine that called Backfill.
	Progress func(tick time.Time, outcome string, sum BackfillSummary)
}

// BackfillSummary counts what a backfill did with its ticks.
type BackfillSummary struct {
	// Ticks is the number of the job's ticks in the range.
	Ticks int
	// Ran and Failed count the ticks whose run here succeeded or failed (failed, lease_lost, a
	// timeout or panic), after the job's retries.
	Ran, Failed int
	// Done counts the ticks found done on the nodes (a run succeeded, here or elsewhere, while
	// their done marker lives); Elsewhere those another replica was running.
	Done, Elsewhere int
	// Paused counts the ticks not run because the job's history shows them skipped while the
	// job was paused (outcome skipped_paused), and no attempt to run them since; 0 with
	// IncludePaused.
	Paused int
}

// Backfill runs the ticks of the job named name in [from, to] that have not run: each once
// across the cluster, one at a time, in order, through the job's whole chain (its
// middleware, Lock, Retries, Timeout), with job.Run.Backfill set, without the job's jitter
// delay (Options.Jitter: job.Run.PlannedStart is when the backfill reached the tick), and recorded in the history
// as backfilled, with job.Run.By and Record.By set to who asked: the operator named by ctx
// (WithOperator), else this replica. A tick is not run again when it ran: when the job's history (WithHistorySize)
// shows a run of it that succeeded, or when its done marker is still on the nodes (it ran
// within the tick retention, WithTickRetention). A tick that the history shows skipped because
// the job was paused then, and not tried since, is not run either, unless opts.IncludePaused:
// a pause is taken to mean those ticks were not wanted. Both rely on the history as far back
// as it reaches (WithHistorySize): a tick whose record was dropped, with its done marker gone,
// is run. Each tick takes its own tick lock, so replicas that backfill the same range at
// once share it out. Each tick gets a window like a scheduled one, counted from when the
// backfill reaches it. The job's overlap rule holds: with Forbid, a tick that finds another
// run of the job under way waits for it (it is not skipped). from must not be after to, and to must not be in the future (the scheduler
// runs those ticks).
//
// Backfill blocks until the last tick ended. Ending ctx stops it after the tick under way,
// whose run is not cancelled (Stop cancels it). Called from a run of the same job with
// Forbid, it waits for that run, that is until ctx ends: call it from elsewhere. It needs a started scheduler with the job
// registered. It returns what it did, and an error when it could not go on: ctx ended, the
// scheduler was stopped (ErrStopped), the job is paused, or the lock nodes were unavailable
// for a tick's whole window (redlock.ErrQuorumUnavailable).
func (s *Scheduler) Backfill(ctx context.Context, name string, from, to time.Time, opts BackfillOptions) (BackfillSummary, error) {
	var sum BackfillSummary
	if opts.Max == 0 {
		opts.Max = scheddefault.BackfillMax
	}
	e, err := s.backfillJob(name, from, to, opts.Max)
	if err != nil {
		return sum, err
	}
	by, err := operator(ctx, s.cfg.replica)
	if err != nil {
		return sum, fmt.Errorf("scheduler: backfill %q: %w", name, err)
	}
	ticks, err := backfillTicks(e, name, from, to, opts.Max)
	if err != nil {
		return sum, err
	}
	sum.Ticks = len(ticks)
	past := s.pastTicks(ctx, name, from)
	for _, t := range ticks {
		if err := ctx.Err(); err != nil {
			return sum, fmt.Errorf("scheduler: backfill %q: stopped before tick %s: %w", name, t.Format(time.RFC3339), err)
		}
		p := past[t.UnixMilli()]
		pausedThen := p.paused && !p.tried && !p.ran && !opts.IncludePaused
		result, err := outcome.SkippedDone, error(nil)
		switch {
		case pausedThen:
			result = outcome.SkippedPaused
		case !p.ran:
			result, err = s.backfillTick(ctx, e, t, by)
		}
		if err := sum.add(name, t, result, pausedThen, err); err != nil {
			return sum, err
		}
		if opts.Progress != nil {
			opts.Progress(t, result, sum)
		}
	}
	return sum, nil
}

// backfillJob returns the job named name, once the backfill of [from, to] with at most limit
// ticks is found possible.
func (s *Scheduler) backfillJob(name string, from, to time.Time, limit int) (*entry, error) {
	s.mu.Lock()
	e, st := s.entries[name], s.state
	s.mu.Unlock()
	switch {
	case e == nil:
		return nil, fmt.Errorf("%w: backfill %q", ErrUnknownJob, name)
	case st == stopped:
		return nil, fmt.Errorf("%w: backfill %q", ErrStopped, name)
	case st != running:
		return nil, fmt.Errorf("scheduler: backfill %q: the scheduler is not started: Start it first", name)
	case limit < 0:
		return nil, fmt.Errorf("scheduler: backfill %q: Max %d: give a positive bound, or 0 for %d", name, limit, scheddefault.BackfillMax)
	case from.After(to):
		return nil, fmt.Errorf("scheduler: backfill %q: from %s is after to %s: give the range's start first", name, from.Format(time.RFC3339), to.Format(time.RFC3339))
	case to.After(s.cfg.clock.Now()):
		return nil, fmt.Errorf("scheduler: backfill %q: to %s is in the future: the scheduler runs those ticks; end the range now or earlier", name, to.Format(time.RFC3339))
	}
	return e, nil
}

// backfillTicks returns the ticks of e, the job named name, in [from, to], or an error if
// there are more than limit.
func backfillTicks(e *entry, name string, from, to time.Time, limit int) ([]time.Time, error) {
	var ticks []time.Time
	for t := e.sched.Next(from.Add(-time.Nanosecond)); !t.IsZero() && !t.After(to); t = e.sched.Next(t) {
		if len(ticks) == limit {
			return nil, fmt.Errorf("scheduler: backfill %q: more than %d ticks from %s to %s: shorten the range or raise the bound (Max, --max)",
				name, limit, from.Format(time.RFC3339), to.Format(time.RFC3339))
		}
		ticks = append(ticks, t)
	}
	return ticks, nil
}

// add counts the outcome of the backfill of the tick t of job name (err: the run's error), or
// returns the error that ends the backfill: the job is paused now, or the tick could not be
// run for another reason than a failure of its own.
func (sum *BackfillSummary) add(name string, t time.Time, result string, pausedThen bool, err error) error {
	switch result {
	case outcome.Ran:
		sum.Ran++
	case outcome.SkippedDone:
		sum.Done++
	case outcome.SkippedHeld:
		sum.Elsewhere++
	case outcome.SkippedPaused:
		if !pausedThen {
			return fmt.Errorf("scheduler: backfill %q: the job is paused: resume it, then backfill from %s", name, t.Format(time.RFC3339))
		}
		sum.Paused++
	case outcome.QuorumUnavailable, outcome.Stopped, outcome.SkippedLate, outcome.SkippedOverlap:
		return fmt.Errorf("scheduler: backfill %q: tick %s: %w", name, t.Format(time.RFC3339), err)
	default:
		sum.Failed++
	}
	return nil
}

// pastTick is what a job's history says of one of its ticks.
type pastTick struct {
	ran    bool // a run of it succeeded
	paused bool // it was skipped, when it came, because the job was paused
	tried  bool // a run of it started (it may have failed)
}

// pastTicks returns what the job's history says of its ticks from from on, by Unix
// milliseconds, so that a backfill does not run again the ticks run to success once their
// done markers have expired, nor the ticks skipped while the job was paused. A history that
// cannot be read is no reason not to go on: each tick's lock still refuses a tick whose done
// marker is there.
func (s *Scheduler) pastTicks(ctx context.Context, name string, from time.Time) map[int64]pastTick {
	past := map[int64]pastTick{}
	if s.cfg.historySize == 0 {
		return past
	}
	records, _ := s.ctl.history(ctx, name, s.cfg.historySize, false)
	for _, r := range records {
		if r.Trigger != "" || r.Tick.Before(from) {
			continue
		}
		p := past[r.Tick.UnixMilli()]
		switch {
		case r.Outcome == outcome.Ran:
			p.ran = true
		case r.Outcome == outcome.SkippedPaused:
			p.paused = p.paused || !r.Backfill // a backfill that found the job paused is no pause of the tick
		default:
			p.tried = true
		}
		past[r.Tick.UnixMilli()] = p
	}
	return past
}

// backfillTick runs one tick of e as a backfill asked for by by, waiting while another run of the job is under
// way (skipped_overlap), and returns its outcome.
func (s *Scheduler) backfillTick(ctx context.Context, e *entry, tick time.Time, by string) (string, error) {
	for {
		done := make(chan error, 1)
		s.mu.Lock()
		if s.state != running {
			s.mu.Unlock()
			return outcome.Stopped, ErrStopped
		}
		now := s.cfg.clock.Now() // a backfilled tick starts when the backfill reaches it: no jitter delay
		run := &job.Run{Job: e.job.Name, Tick: tick, PlannedStart: now, Backfill: true, By: by, Attempt: 1, Replica: s.cfg.replica,
			Deadline: now.Add(e.keepDone - 2*s.cfg.maxSkew)}
		s.goRun(e, run, func(err error) { done <- err })
		s.mu.Unlock()
		err := <-done
		if got := middleware.Outcome(err); got != outcome.SkippedOverlap {
			return got, err
		}
		t := s.cfg.clock.NewTimer(s.cfg.triggerPoll)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return outcome.SkippedOverlap, errors.Join(err, ctx.Err())
		case <-s.stop:
			t.Stop()
			return outcome.Stopped, ErrStopped
		}
	}
}
