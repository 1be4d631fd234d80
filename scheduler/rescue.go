package scheduler

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/hashslot"
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

// rescueBatch is the most keys that one script of the rescuer reads on a node: the hashes of
// runs in flight of that many jobs, or the locks of that many runs.
var rescueBatch = 64

var (
	setFieldScript = redis.NewScript(`return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])`)
	// Reads the hashes of runs in flight KEYS (layout.RunningKey): {i, {field, value, …}, …}
	// for each KEYS[i] that has fields. A key that is not a hash reads as empty.
	readRunningScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local h = redis.pcall('HGETALL', k)
  if h.err == nil and #h > 0 then
    out[#out + 1] = i
    out[#out + 1] = h
  end
end
return out`)
	// Returns, for each lock KEYS[i], 1 where it has the value ARGV[i] (held, or kept done), 0
	// where it has not, -1 where it is not a hash (this node cannot tell).
	holdsScript = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  local v = redis.pcall('HGET', k, '` + layout.FieldValue + `')
  if type(v) == 'table' then
    out[i] = -1
  elseif v == ARGV[i] then
    out[i] = 1
  else
    out[i] = 0
  end
end
return out`)
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

// runInFlight is an attempt in flight that the rescuer found: its job, the field of its
// record in the job's hash of runs in flight, and the record.
type runInFlight struct {
	job, field string
	f          inFlight
}

// rescue looks at the in-flight records of every job of the scheduler. A record whose lock a
// quorum of the nodes says is not the attempt's (released, expired, or another attempt's) is
// a suspect: its holder may be writing its record. A suspect found again at the next look
// (prev, keyed by job and field) is ended as interrupted. It returns this look's suspects. It
// stops looking when ctx ends (Stop), between one request and the next.
//
// It reads the records of rescueBatch jobs with one script per node, whose reply lists only
// the jobs that have records, then checks the locks of rescueBatch records with one script
// per node: a look sends each node jobs/rescueBatch + records/rescueBatch requests, rounded
// up, and where the nodes are Redis Clusters that many per hash slot.
func (s *Scheduler) rescue(ctx context.Context, prev map[string]bool) map[string]bool {
	next := map[string]bool{}
	cluster := lockseam.ClusterNodes(s.locks)
	var runs []runInFlight
	for _, names := range rescueBatches(s.jobNames(), cluster, func(name string) string { return layout.RunningKey(s.cfg.prefix, name) }) {
		if ctx.Err() != nil {
			return next
		}
		runs = append(runs, s.readInFlight(ctx, names)...)
	}
	for _, batch := range rescueBatches(runs, cluster, func(r runInFlight) string { return r.f.Key }) {
		if ctx.Err() != nil {
			return next
		}
		s.checkInFlight(ctx, batch, prev, next)
	}
	return next
}

// jobNames returns the names of the scheduler's jobs, sorted.
func (s *Scheduler) jobNames() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.entries))
}

// rescueBatches splits items into batches of at most rescueBatch, for one script each. Where
// the nodes are Redis Clusters (cluster), the keys of a batch's items (key) share a hash slot.
func rescueBatches[T any](items []T, cluster bool, key func(T) string) [][]T {
	if !cluster {
		return slices.Collect(slices.Chunk(items, rescueBatch))
	}
	var batches [][]T
	filling := map[int]int{} // hash slot → its batch being filled
	for _, it := range items {
		slot := hashslot.Of(key(it))
		b, ok := filling[slot]
		if !ok || len(batches[b]) == rescueBatch {
			b = len(batches)
			filling[slot] = b
			batches = append(batches, nil)
		}
		batches[b] = append(batches[b], it)
	}
	return batches
}

// readInFlight reads the in-flight records of the jobs named names from every node, in one
// script per node, and returns those found on any node. It returns none when fewer than a
// quorum of nodes answered: the next look reads them again.
func (s *Scheduler) readInFlight(ctx context.Context, names []string) []runInFlight {
	keys := make([]string, len(names))
	for i, name := range names {
		keys[i] = layout.RunningKey(s.cfg.prefix, name)
	}
	replies, err := lockseam.Broadcast(s.locks, ctx, readRunningScript, keys)
	if err != nil {
		return nil
	}
	hashes := make([][]any, len(names)) // each job's hash as each node that has one replied
	for _, r := range replies {
		found, _ := r.([]any)
		for i := 0; i+1 < len(found); i += 2 {
			if j, _ := found[i].(int64); j >= 1 && int(j) <= len(names) {
				hashes[j-1] = append(hashes[j-1], found[i+1])
			}
		}
	}
	var runs []runInFlight
	for j, h := range hashes {
		if h == nil {
			continue
		}
		_, records := inFlightFields(h)
		for field, value := range records {
			var f inFlight
			if json.Unmarshal([]byte(value), &f) != nil || f.Key == "" {
				continue
			}
			runs = append(runs, runInFlight{job: names[j], field: field, f: f})
		}
	}
	return runs
}

// checkInFlight asks every node, in one script per node, whether the locks of runs are held by
// their attempts, adds each run whose lock is not to the suspects next, and interrupts those
// among them that were suspects at the look before (prev). It leaves runs alone when fewer than
// a quorum of nodes answered, and interrupts none once ctx ended.
func (s *Scheduler) checkInFlight(ctx context.Context, runs []runInFlight, prev, next map[string]bool) {
	keys, values := make([]string, len(runs)), make([]any, len(runs))
	for i, r := range runs {
		keys[i], values[i] = r.f.Key, r.f.Value
	}
	replies, err := lockseam.Broadcast(s.locks, ctx, holdsScript, keys, values...)
	if err != nil {
		return
	}
	for i, r := range runs {
		gone := 0
		for _, reply := range replies {
			if held, _ := reply.([]any); i < len(held) && held[i] == int64(0) {
				gone++
			}
		}
		if gone < lockseam.Quorum(s.locks) {
			s.cfg.logger.Debug("cronlock: run in flight, its lock held", "job", r.job, "tick", time.UnixMilli(r.f.Tick), "attempt", r.f.Attempt, "holder", r.f.Replica)
			continue // the attempt holds its lock: alive, or done
		}
		id := r.job + " " + r.field
		next[id] = true
		if prev[id] && ctx.Err() == nil {
			s.interrupt(ctx, r.job, r.field, r.f)
		}
	}
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
