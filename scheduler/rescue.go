package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// inFlight is what the nodes know of an attempt under way: enough to record it interrupted
// if its holder vanishes, and its lock, to tell whether it did.
type inFlight struct {
	Tick     int64  `json:"tick"`    // Unix ms
	Planned  int64  `json:"planned"` // Unix µs
	Trigger  string `json:"trigger,omitempty"`
	Backfill bool   `json:"backfill,omitempty"`
	Attempt  int    `json:"attempt"`
	Replica  string `json:"replica"`
	PID      int    `json:"pid"`
	Start    int64  `json:"start"` // Unix µs
	Token    uint64 `json:"token"`
	Trace    string `json:"trace,omitempty"`
	Key      string `json:"key"`   // the attempt's lock
	Value    string `json:"value"` // the lock's value while the attempt holds it
}

var (
	setFieldScript = redis.NewScript(`return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])`)
	getAllScript   = redis.NewScript(`return redis.call('HGETALL', KEYS[1])`)
	// Returns 1 where the lock KEYS[1] has the value ARGV[1] (held, or kept done), else 0.
	holdsScript = redis.NewScript(`if redis.call('HGET', KEYS[1], '` + layout.FieldValue + `') == ARGV[1] then return 1 end return 0`)
)

// mergeInFlight returns the attempts in flight that a quorum of the nodes' replies to an
// HGETALL of a job's in-flight hash list (nil for a node that did not answer), oldest first.
// A quorum, not any node: a node that missed an attempt's end would list it for ever.
func (c *Control) mergeInFlight(replies []any) []InFlight {
	votes, values := inFlightFields(replies)
	var out []InFlight
	for field, n := range votes {
		var f inFlight
		if n < lockseam.Quorum(c.locks) || json.Unmarshal([]byte(values[field]), &f) != nil {
			continue
		}
		out = append(out, InFlight{Tick: time.UnixMilli(f.Tick), Trigger: f.Trigger, Attempt: f.Attempt, Replica: f.Replica,
			Start: time.UnixMicro(f.Start), Token: f.Token})
	}
	slices.SortFunc(out, func(a, b InFlight) int { return cmp.Or(a.Start.Compare(b.Start), cmp.Compare(a.Token, b.Token)) })
	return out
}

// inFlightFields reads the nodes' replies to an HGETALL of a job's in-flight hash (nil for a
// node that did not answer): how many nodes hold each field, and its value on one of them.
func inFlightFields(replies []any) (votes map[string]int, values map[string]string) {
	votes, values = map[string]int{}, map[string]string{}
	for _, r := range replies {
		kv, _ := r.([]any)
		for i := 0; i+1 < len(kv); i += 2 {
			k, _ := kv[i].(string)
			v, _ := kv[i+1].(string)
			votes[k]++
			values[k] = v
		}
	}
	return votes, values
}

// startInFlight writes the in-flight record of rec's attempt, whose handler is about to
// start under its lease, on every node, in a goroutine that the attempt's end waits for
// (rec.inFlightDone): the handler does not wait for a slow node. Best effort: a failure is
// logged, and a run whose record is on no node cannot be rescued.
func (s *Scheduler) startInFlight(rec *recorder) {
	if s.cfg.historySize == 0 || rec.lease == nil {
		return
	}
	run, l := rec.run, rec.lease.Lock()
	f := inFlight{Tick: run.Tick.UnixMilli(), Planned: run.PlannedStart.UnixMicro(), Trigger: run.Trigger, Backfill: run.Backfill,
		Attempt: rec.attempt, Replica: run.Replica, PID: os.Getpid(), Start: rec.start.UnixMicro(), Token: rec.token, Trace: rec.traceID,
		Key: l.Key(), Value: l.Value()}
	value, _ := json.Marshal(f) // plain data: cannot fail
	field, attempt, done := Record{Tick: run.Tick, Trigger: run.Trigger, Token: rec.token}.runID(), rec.attempt, make(chan struct{})
	rec.inFlight, rec.inFlightDone = field, done
	go func() {
		defer close(done)
		if _, err := lockseam.Broadcast(s.locks, context.Background(), setFieldScript, []string{layout.RunningKey(s.cfg.prefix, run.Job)}, field, value); err != nil {
			s.cfg.logger.Warn("cronlock: could not record the run in flight; if its replica vanishes, it is not recorded interrupted",
				"job", run.Job, "tick", run.Tick, "attempt", attempt, "err", err)
		}
	}()
}

// rescueRuns looks at the in-flight records of the scheduler's jobs every rescue period until
// Stop, and ends those whose holder vanished (rescue).
func (s *Scheduler) rescueRuns() {
	defer close(s.rescueDone)
	if s.cfg.historySize == 0 {
		return
	}
	t := time.NewTimer(s.cfg.rescueEvery)
	defer t.Stop()
	var suspects map[string]bool
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		suspects = s.rescue(s.stopping, suspects)
		t.Reset(s.cfg.rescueEvery)
	}
}

// rescue looks at the in-flight records of every job of the scheduler. A record whose lock a
// quorum of the nodes says is not the attempt's (released, expired, or another attempt's) is
// a suspect: its holder may be writing its record. A suspect found again at the next look
// (prev, keyed by job and field) is ended as interrupted. It returns this look's suspects. It
// stops looking when ctx ends (Stop), between one request and the next.
func (s *Scheduler) rescue(ctx context.Context, prev map[string]bool) map[string]bool {
	next := map[string]bool{}
	for _, e := range s.Entries() {
		if ctx.Err() != nil {
			return next
		}
		replies, err := lockseam.Broadcast(s.locks, ctx, getAllScript, []string{layout.RunningKey(s.cfg.prefix, e.Name)})
		if err != nil {
			continue // fewer than a quorum answered: look again next time
		}
		_, runs := inFlightFields(replies)
		for field, value := range runs {
			if ctx.Err() != nil {
				return next
			}
			var f inFlight
			if json.Unmarshal([]byte(value), &f) != nil || f.Key == "" {
				continue
			}
			held, err := lockseam.Broadcast(s.locks, ctx, holdsScript, []string{f.Key}, f.Value)
			if err != nil {
				continue
			}
			gone := 0
			for _, h := range held {
				if h == int64(0) {
					gone++
				}
			}
			if gone < lockseam.Quorum(s.locks) {
				s.cfg.logger.Debug("cronlock: run in flight, its lock held", "job", e.Name, "tick", time.UnixMilli(f.Tick), "attempt", f.Attempt, "holder", f.Replica)
				continue // the attempt holds its lock: alive, or done
			}
			id := e.Name + " " + field
			next[id] = true
			if prev[id] {
				s.interrupt(ctx, e.Name, field, f)
			}
		}
	}
	return next
}

// interrupt records the attempt f of the job name (in-flight field field) as interrupted on
// the nodes that still have its in-flight record, and, when a quorum of them took it (one
// replica at most, however many rescue it at once), logs it and passes it through the
// scheduler's middleware (WithMiddleware), which counts and traces it with outcome
// interrupted.
func (s *Scheduler) interrupt(ctx context.Context, name, field string, f inFlight) {
	s.mu.Lock()
	e := s.entries[name]
	s.mu.Unlock()
	if e == nil {
		return
	}
	tick := time.UnixMilli(f.Tick)
	rerr := fmt.Errorf("%w: replica %s (pid %d) held the lock of attempt %d and is gone; found by %s", middleware.ErrInterrupted, f.Replica, f.PID, f.Attempt, s.cfg.replica)
	r := Record{Job: name, Tick: tick, PlannedStart: time.UnixMicro(f.Planned), Trigger: f.Trigger, Backfill: f.Backfill, Attempt: f.Attempt,
		Replica: f.Replica, Outcome: outcome.Interrupted, Start: time.UnixMicro(f.Start), Token: f.Token, TraceID: f.Trace, Error: rerr.Error()}
	wrote, err := s.appendHistory(r, e.keepDone, field, true)
	if wrote < lockseam.Quorum(s.locks) || err != nil {
		return
	}
	s.cfg.logger.Warn("cronlock: run interrupted: its replica vanished", "job", name, "tick", tick, "attempt", f.Attempt,
		"token", f.Token, "holder", f.Replica, "pid", f.PID, "trigger", f.Trigger)
	run := &job.Run{Job: name, Tick: tick, PlannedStart: r.PlannedStart, Trigger: f.Trigger, Backfill: f.Backfill, Attempt: f.Attempt,
		FencingToken: f.Token, Replica: f.Replica}
	_ = middleware.Chain(s.cfg.middleware...)(func(context.Context) error { return rerr })(job.NewContext(ctx, run))
}
