package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cronlock/cronlock/job"
)

// phase is how far a run has got: Stop's error names it for each run it left.
type phase int32

const (
	// phaseClaiming: the run takes its lock, or waits for it or for a retry; no handler of it
	// runs. Once Stop was called it only gives its tick up: no handler starts.
	phaseClaiming phase = iota
	// phaseRunning: its handler runs.
	phaseRunning
	// phaseFinishing: its handler returned; the run releases its lock (or keeps it as done)
	// and writes its record.
	phaseFinishing
)

func (p phase) String() string {
	switch p {
	case phaseRunning:
		return "running"
	case phaseFinishing:
		return "finishing"
	}
	return "claiming"
}

// phase returns where the run is now.
func (r *recorder) phase() phase { return phase(r.stage.Load()) }

// giveUpWait bounds how long, from its call, Stop waits past its context's end for the runs
// whose handler is not running — giving their ticks up (phaseClaiming), or releasing their
// locks and writing their records (phaseFinishing): they run no code of the job's, and end as
// soon as their requests to the nodes do, each bounded by a node timeout.
const giveUpWait = time.Second

// stopError is Stop's error when its context ended before every run did. It matches the
// context's error and cause, and names the runs left.
type stopError struct {
	cut  bool      // a handler was running when the context ended: its context was cancelled
	left []leftRun // the runs still under way when Stop returned
	err  error     // the context's error, joined with its cause when that differs
}

// leftRun is a run that Stop left under way, as its error names it.
type leftRun struct {
	job, trigger string
	tick         time.Time
	attempt      int
	phase        phase
}

func (e *stopError) Error() string {
	var b strings.Builder
	b.WriteString("scheduler: stop: ")
	if e.cut {
		b.WriteString("running jobs were cancelled")
		if len(e.left) > 0 {
			b.WriteString("; ")
		}
	}
	if n := len(e.left); n > 0 {
		if n == 1 {
			b.WriteString("1 run left, still ending (a later Stop waits for it): ")
		} else {
			fmt.Fprintf(&b, "%d runs left, still ending (a later Stop waits for them): ", n)
		}
		for i, r := range e.left {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "job %q ", r.job)
			if r.trigger != "" {
				fmt.Fprintf(&b, "manual run %s", r.trigger)
			} else {
				fmt.Fprintf(&b, "tick %s", r.tick.UTC().Format(time.RFC3339Nano))
			}
			fmt.Fprintf(&b, " attempt %d (%s)", r.attempt, r.phase)
		}
	}
	b.WriteString(": ")
	b.WriteString(e.err.Error())
	return b.String()
}

func (e *stopError) Unwrap() error { return e.err }

// runsLeft reports whether err, from Stop, says that runs were left under way (schedseam.RunsLeft).
func runsLeft(err error) bool {
	se, ok := errors.AsType[*stopError](err)
	return ok && len(se.left) > 0
}

// drain waits until no run but own (the run Stop is called from, if any) is under way, and
// returns nil. If ctx ends first, it cancels the runs' contexts (ErrStopped), and returns as
// soon as every run left has its handler running, or giveUp fired: nil if none is left and no
// handler was running at ctx's end, else a *stopError.
func (s *Scheduler) drain(ctx context.Context, own *recorder, giveUp <-chan time.Time) error {
	done := ctx.Done()
	var ended *stopError // set once ctx ended
	gaveUp := false
	for {
		s.mu.Lock()
		left, idle := s.leftRuns(own)
		changed := s.runsChanged
		s.mu.Unlock()
		switch {
		case ended == nil && len(left) == 0:
			return nil
		case ended != nil && (idle == 0 || gaveUp):
			if len(left) == 0 && !ended.cut {
				return nil
			}
			ended.left = left
			return ended
		}
		select {
		case <-changed:
		case <-done:
			done = nil
			ended = s.cancelRunsFor(ctx, own)
		case <-giveUp:
			giveUp, gaveUp = nil, true
		}
	}
}

// leftRuns returns the runs under way but own, sorted, and how many of them have no handler
// running (idle); s.mu must be held.
func (s *Scheduler) leftRuns(own *recorder) (left []leftRun, idle int) {
	for rec := range s.active {
		if rec == own {
			continue
		}
		p := rec.phase()
		if p != phaseRunning {
			idle++
		}
		left = append(left, leftRun{job: rec.run.Job, trigger: rec.run.Trigger, tick: rec.run.Tick, attempt: int(max(rec.shown.Load(), 1)), phase: p})
	}
	slices.SortFunc(left, func(a, b leftRun) int {
		return cmp.Or(strings.Compare(a.job, b.job), a.tick.Compare(b.tick), strings.Compare(a.trigger, b.trigger))
	})
	return left, idle
}

// cancelRunsFor cancels the runs' contexts because Stop's ctx ended, and returns Stop's error
// so far: ctx's error and cause, and whether a handler other than own's was running.
func (s *Scheduler) cancelRunsFor(ctx context.Context, own *recorder) *stopError {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := &stopError{err: ctx.Err()}
	if cause := context.Cause(ctx); cause != e.err {
		e.err = errors.Join(e.err, cause)
	}
	for rec := range s.active {
		e.cut = e.cut || (rec != own && rec.phase() == phaseRunning)
	}
	s.cancelRuns(fmt.Errorf("%w: %w: Stop's context ended before the run finished", ErrStopped, job.ErrStopped))
	return e
}
