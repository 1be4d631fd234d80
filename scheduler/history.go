package scheduler

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// Record is one entry of a job's run history: one attempt at a tick or manual run whose handler
// ran (outcome ran, failed, lease_lost, replaced, stopped when Stop cut it short, or
// interrupted when its replica vanished and another one recorded it), or a tick skipped
// because the job was paused (skipped_paused). Each attempt of a tick (job.Options.Retries)
// has its own record; an attempt that did not run (the tick was done or held elsewhere, or its
// attempts were used up across the cluster) has none.
type Record struct {
	Job string
	// Tick is the tick's instant, or when the manual run was asked for.
	Tick time.Time
	// PlannedStart is when the run was planned to start (job.Run.PlannedStart): Tick plus the
	// tick's jitter delay (job.Options.Jitter).
	PlannedStart time.Time
	// Trigger is the manual run's id; empty for a tick.
	Trigger string
	// Backfill is true for a past tick run by Backfill.
	Backfill bool
	// By names who asked for a manual run or a backfill (job.Run.By); empty for a tick.
	By string
	// Attempt is the attempt's number at its tick, from 1 (job.Run.Attempt: counted across the
	// cluster); 1 for a manual run, and for a record written by a version of cronlock that kept
	// one record per tick.
	Attempt int
	// Replica is the replica that ran it (for a pause: the first that recorded the skip).
	Replica string
	// Outcome is middleware.Outcome's name of it.
	Outcome string
	// Start is when the handler started (for a skip, when it was skipped); Duration how long
	// it ran, 0 for a skip.
	Start    time.Time
	Duration time.Duration
	// Token is the run's fencing token, 0 for a skip.
	Token uint64
	// TraceID is the id of the run's trace (32 hex digits), empty when not traced.
	TraceID string
	// Error is the run's error text, empty on success.
	Error string
	// Output is what the run kept of its output (KeepOutput): filled by HistoryWithOutput
	// only, empty in History and Status.
	Output string
}

// runID names the record for deduplication across nodes and replicas: one per run (the tick
// or trigger and its token), one per paused tick.
func (r Record) runID() string {
	id := strconv.FormatInt(r.Tick.UnixMilli(), 10)
	if r.Trigger != "" {
		id = r.Trigger
	}
	if r.Token == 0 {
		return id + "/" + r.Outcome
	}
	return id + "/" + strconv.FormatUint(r.Token, 10)
}

var (
	// Appends a record (fields ARGV[7..]) to the stream KEYS[1], capped at ARGV[1] entries,
	// unless the marker KEYS[2] of the same record exists (another replica wrote it); the marker
	// lives ARGV[2] ms. It removes the run's in-flight record, field ARGV[3] of the hash KEYS[3]
	// (empty: none). With ARGV[4] = '1' (a rescue) it writes only where that in-flight record
	// still is: the run's own record, written meanwhile, removed it. With a non-empty ARGV[5]
	// (the run's output), appends it, with the record's id ARGV[6], to the stream KEYS[4] under
	// the record's entry id; that stream keeps the outputs of the records kept, and is read only
	// when asked for.
	appendScript = redis.NewScript(`
if ARGV[4] == '1' and redis.call('HEXISTS', KEYS[3], ARGV[3]) == 0 then
  return 0
end
if ARGV[3] ~= '' then
  redis.call('HDEL', KEYS[3], ARGV[3])
end
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  return 0
end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', ARGV[1], '*', unpack(ARGV, 7))
if ARGV[5] ~= '' then
  redis.pcall('XADD', KEYS[4], id, 'run', ARGV[6], 'output', ARGV[5])
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('XTRIM', KEYS[4], 'MINID', redis.call('XRANGE', KEYS[1], '-', '+', 'COUNT', 1)[1][1])
end
return 1`)
	readScript = redis.NewScript(`return redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1])`)
	// Reads the last ARGV[1] records in KEYS[1] and outputs in KEYS[2].
	readOutputScript = redis.NewScript(`return {redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', ARGV[1]), redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[1])}`)
	// Reads a job's pause KEYS[1], its last ARGV[1] records in KEYS[2] and its runs in flight
	// KEYS[3], for Status: one round trip per node (the keys share the job's hash tag).
	statusScript = redis.NewScript(`return {redis.call('GET', KEYS[1]), redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', ARGV[1]), redis.call('HGETALL', KEYS[3])}`)
)

// recorder collects what the history needs from inside the handler chain: the attempt number
// and token that Lock set, the trace, and the handler's time, for the attempt under way. It
// also tells Stop which run is which: its owner, and where the run is (phase).
type recorder struct {
	owner  *Scheduler
	run    *job.Run                // the run it records
	keep   time.Duration           // how long the run's history deduplication markers live
	cancel context.CancelCauseFunc // ends the run's context (a replacement)
	lease  *redlock.Lease          // the run's lease, set before running
	// Where the run is, which Stop and the heartbeat read while the run's goroutine writes it:
	// stage holds its phase, shown the number of its attempt under way.
	stage atomic.Int32
	shown atomic.Int32
	ran   bool // the handler of some attempt started
	// inFlight is the field of the attempt's in-flight record (startInFlight), empty if none
	// was written; inFlightDone is closed once it was written, nil if none is.
	inFlight     string
	inFlightDone chan struct{}
	// The attempt under way: zero start until its handler starts.
	attempt int
	token   uint64
	traceID string
	start   time.Time
	elapsed time.Duration
	output  atomic.Pointer[string] // KeepOutput's, for the attempt under way
}

type recorderKey struct{}

// KeepOutput keeps output, what the run under ctx wrote (e.g. the tail of its log), with the
// record of the run's attempt on the lock nodes: its last 64 KiB, cut at a UTF-8
// character. A handler calls it before it returns; a later call replaces the earlier.
// HistoryWithOutput reads it back. It does nothing outside a run of a Scheduler, or with
// WithHistorySize(0). Outputs take space on every node: up to WithHistorySize of them per job.
func KeepOutput(ctx context.Context, output string) {
	rec, _ := ctx.Value(recorderKey{}).(*recorder)
	if rec == nil {
		return
	}
	if len(output) > scheddefault.MaxOutput {
		output = output[len(output)-scheddefault.MaxOutput:]
		for output != "" && !utf8.RuneStart(output[0]) {
			output = output[1:]
		}
	}
	rec.output.Store(&output)
}

// recordAttempts is the middleware, between Retry and Lock, that writes each attempt's record
// to the history as Lock returns it: an attempt whose handler started, or a tick skipped
// because the job is paused.
func recordAttempts(next job.Handler) job.Handler {
	return func(ctx context.Context) error {
		rec, _ := ctx.Value(recorderKey{}).(*recorder)
		if rec == nil {
			return next(ctx)
		}
		rec.start, rec.attempt, rec.inFlight, rec.inFlightDone = time.Time{}, 1, "", nil
		rec.output.Store(nil)
		if run, ok := job.RunFrom(ctx); ok {
			rec.attempt = max(run.Attempt, 1)
		}
		rec.shown.Store(int32(rec.attempt))
		err := next(ctx)
		rec.owner.recordAttempt(rec, err)
		rec.stage.Store(int32(phaseClaiming)) // until the next attempt, if any, takes its lock
		return err
	}
}

// record is the middleware, just inside Lock, that fills the run's recorder for the attempt
// under way. The error of a run that Stop cut short is made to match job.ErrStopped.
func record(next job.Handler) job.Handler {
	return func(ctx context.Context) error {
		rec, _ := ctx.Value(recorderKey{}).(*recorder)
		if rec == nil {
			return next(ctx)
		}
		if run, ok := job.RunFrom(ctx); ok {
			rec.token, rec.attempt = run.FencingToken, max(run.Attempt, 1)
		}
		rec.shown.Store(int32(rec.attempt))
		rec.ran = true
		rec.traceID, rec.start = traceID(ctx), time.Now()
		if le, ok := lockseam.LeaseFrom(ctx); ok {
			rec.lease = le.(*redlock.Lease)
		}
		rec.owner.startInFlight(rec)
		rec.stage.Store(int32(phaseRunning))
		err := next(ctx)
		rec.stage.Store(int32(phaseFinishing))
		rec.elapsed = time.Since(rec.start)
		if cause := context.Cause(ctx); err != nil && errors.Is(cause, job.ErrStopped) && !errors.Is(err, job.ErrStopped) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return err
	}
}

// runHandler runs e's handler chain for run, then logs the outcome. It returns the handler's
// error. Each attempt is recorded in the history as it ends (recordAttempts).
func (s *Scheduler) runHandler(e *entry, run *job.Run, rec *recorder) error {
	ctx, cancel := context.WithCancelCause(job.NewContext(s.runCtx, run))
	defer cancel(nil)
	rec.cancel = cancel
	err := e.handler(context.WithValue(ctx, recorderKey{}, rec))
	s.report(run, err, rec.ran)
	return err
}

// recordAttempt writes the record of rec's attempt, which ended with err, to the history: if
// its handler started, or if it was skipped because the job is paused. Other attempts did not
// run and leave no record.
func (s *Scheduler) recordAttempt(rec *recorder, err error) {
	if rec.inFlightDone != nil {
		<-rec.inFlightDone // its in-flight record is written before it is removed
	}
	started := !rec.start.IsZero()
	result := middleware.Outcome(err)
	switch {
	case s.cfg.historySize == 0:
		return
	case started:
	case result == outcome.SkippedPaused:
	default:
		return
	}
	run := rec.run
	r := Record{Job: run.Job, Tick: run.Tick, PlannedStart: run.PlannedStart, Trigger: run.Trigger, Backfill: run.Backfill, By: run.By, Attempt: rec.attempt,
		Replica: run.Replica, Outcome: result, Start: rec.start, Duration: rec.elapsed, Token: rec.token, TraceID: rec.traceID}
	if result == outcome.SkippedPaused {
		r.Start, r.Duration, r.Token, r.TraceID = time.Now(), 0, 0, ""
	} else if err != nil {
		r.Error = err.Error()
	}
	if out := rec.output.Load(); out != nil {
		r.Output = *out
	}
	if _, werr := s.appendHistory(r, rec.keep, rec.inFlight, false); werr != nil {
		s.cfg.logger.Warn("cronlock: could not record the run in the history", "job", run.Job, "tick", run.Tick, "attempt", r.Attempt, "err", werr)
	}
}

// appendHistory writes r to the job's history on every node, and removes the run's in-flight
// record (field inFlight, empty for none); keep is how long the record's deduplication marker
// lives. With rescue, it writes r only on the nodes that still have the in-flight record. It
// returns how many nodes wrote r.
func (s *Scheduler) appendHistory(r Record, keep time.Duration, inFlight string, rescue bool) (int, error) {
	key := layout.HistoryKey(s.cfg.prefix, r.Job)
	only := "0"
	if rescue {
		only = "1"
	}
	args := []any{s.cfg.historySize, keep.Milliseconds(), inFlight, only, r.Output, r.runID(),
		"tick", r.Tick.UnixMilli(), "planned", r.PlannedStart.UnixMicro(), "trigger", r.Trigger, "attempt", r.Attempt, "replica", r.Replica, "outcome", r.Outcome,
		"start", r.Start.UnixMicro(), "duration", r.Duration.Microseconds(), "token", strconv.FormatUint(r.Token, 10),
		"trace", r.TraceID, "error", r.Error}
	if r.Backfill {
		args = append(args, "backfill", "1")
	}
	if r.By != "" {
		args = append(args, "by", r.By)
	}
	replies, err := lockseam.Broadcast(s.locks, context.Background(), appendScript, []string{key, layout.RecordMarkerKey(s.cfg.prefix, r.Job, r.runID()), layout.RunningKey(s.cfg.prefix, r.Job), layout.OutputKey(s.cfg.prefix, r.Job)}, args...)
	wrote := 0
	for _, w := range replies {
		if w == int64(1) {
			wrote++
		}
	}
	return wrote, err
}

// History returns the last n records of the job named name, newest first (by tick, then start), read
// from every lock node that answers and merged, so a minority of nodes down loses nothing.
// At most the history size (WithHistorySize) is kept. It returns an error matching
// ErrUnknownJob if c is a Scheduler's Control and no such job is registered there, and one
// matching redlock.ErrQuorumUnavailable, with the records that could be read, if fewer than a
// quorum of nodes answered.
func (c *Control) History(ctx context.Context, name string, n int) ([]Record, error) {
	if err := c.known(name); err != nil {
		return nil, err
	}
	return c.history(ctx, name, n, false)
}

// HistoryWithOutput returns the last n records of the job named name, as History does, each
// with the output its run kept (KeepOutput). It reads more from the nodes than History: the
// outputs, up to 64 KiB each (KeepOutput).
func (c *Control) HistoryWithOutput(ctx context.Context, name string, n int) ([]Record, error) {
	if err := c.known(name); err != nil {
		return nil, err
	}
	return c.history(ctx, name, n, true)
}

// history reads the last n records of the job named name, with their outputs if withOutput.
func (c *Control) history(ctx context.Context, name string, n int, withOutput bool) ([]Record, error) {
	if n <= 0 {
		return nil, fmt.Errorf("scheduler: history of %q: n %d: ask for at least 1 record", name, n)
	}
	key := layout.HistoryKey(c.cfg.prefix, name)
	script, keys := readScript, []string{key}
	if withOutput {
		script, keys = readOutputScript, append(keys, layout.OutputKey(c.cfg.prefix, name))
	}
	// A run's record is appended when the run ends, after the records of later ticks that
	// ended first, so a node's n entries written last need not be its n newest ticks: read
	// its whole history (at most the history size), then keep the newest n.
	replies, err := lockseam.Broadcast(c.locks, ctx, script, keys, max(n, c.cfg.historySize))
	if replies == nil {
		return nil, fmt.Errorf("scheduler: history of %q: %w", name, err)
	}
	histories, outputs := replies, map[string]string{}
	if withOutput {
		histories = make([]any, len(replies))
		for i, r := range replies {
			pair, _ := r.([]any)
			if len(pair) != 2 {
				continue
			}
			histories[i] = pair[0]
			entries, _ := pair[1].([]any)
			for _, en := range entries {
				if f := streamFields(en); f["run"] != "" {
					outputs[f["run"]] = f["output"]
				}
			}
		}
	}
	out := mergeHistory(name, histories, n)
	for i := range out {
		out[i].Output = outputs[out[i].runID()]
	}
	if err != nil {
		return out, fmt.Errorf("scheduler: history of %q: %w", name, err)
	}
	return out, nil
}

// mergeHistory merges the nodes' replies to readScript (nil for a node that did not answer)
// into the last n records, newest first (by tick, then start), each once. Where the nodes
// disagree about a run — its own record on some, interrupted (a rescue) on others — its own
// record is kept.
func mergeHistory(name string, replies []any, n int) []Record {
	seen := map[string]int{} // index in out
	var out []Record
	for _, reply := range replies {
		entries, _ := reply.([]any)
		for _, en := range entries {
			r, ok := parseRecord(name, en)
			if !ok {
				continue
			}
			i, dup := seen[r.runID()]
			switch {
			case !dup:
				seen[r.runID()] = len(out)
				out = append(out, r)
			case out[i].Outcome == outcome.Interrupted && r.Outcome != outcome.Interrupted:
				out[i] = r // the run's own record, where nodes disagree
			}
		}
	}
	slices.SortFunc(out, func(a, b Record) int {
		return cmp.Or(b.Tick.Compare(a.Tick), b.Start.Compare(a.Start), cmp.Compare(b.runID(), a.runID()))
	})
	if len(out) > n {
		out = out[:n]
	}
	return out
}

// streamFields reads the fields of one stream entry: [id, [field, value, ...]].
func streamFields(en any) map[string]string {
	pair, _ := en.([]any)
	if len(pair) != 2 {
		return nil
	}
	kv, _ := pair[1].([]any)
	f := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		k, _ := kv[i].(string)
		v, _ := kv[i+1].(string)
		f[k] = v
	}
	return f
}

// parseRecord reads one entry of a history stream.
func parseRecord(name string, en any) (Record, bool) {
	f := streamFields(en)
	if f == nil {
		return Record{}, false
	}
	num := func(k string) int64 { v, _ := strconv.ParseInt(f[k], 10, 64); return v }
	token, _ := strconv.ParseUint(f["token"], 10, 64)
	r := Record{Job: name, Tick: time.UnixMilli(num("tick")), Trigger: f["trigger"], Backfill: f["backfill"] == "1", By: f["by"], Replica: f["replica"], Outcome: f["outcome"],
		Start: time.UnixMicro(num("start")), Duration: time.Duration(num("duration")) * time.Microsecond, Token: token,
		TraceID: f["trace"], Error: f["error"]}
	r.PlannedStart = r.Tick                 // a record written before planned starts were
	r.Attempt = max(int(num("attempt")), 1) // 0: a record written before attempts were
	if _, ok := f["planned"]; ok {
		r.PlannedStart = time.UnixMicro(num("planned"))
	}
	return r, r.Outcome != ""
}

// Status is what the cluster knows of one job (Control.Status).
type Status struct {
	// Entry is the job's entry on a Scheduler's Control (Scheduler.Entries); a NewControl's
	// knows no entries, and sets only its Name.
	Entry
	// Paused is the job's pause, nil if it is not paused (the pause key is on fewer than a
	// quorum of the nodes).
	Paused *job.Pause
	// LastRun is the newest record of a run (the last attempt of the newest tick that ran),
	// LastSuccess the newest that ran; nil if the history has none.
	LastRun, LastSuccess *Record
	// Failures counts the ticks and manual runs newer than LastSuccess that failed, lost
	// their lease or were interrupted, each once whatever its attempts: how many in a row failed (at most the
	// history's size).
	Failures int
	// History is every record the nodes keep of the job (WithHistorySize), newest first, as
	// Control.History returns them: the records LastRun and LastSuccess were picked from.
	History []Record
	// Running is the job's attempts under way on any replica, oldest first: those whose
	// in-flight record a quorum of the nodes hold (an attempt's record is written as its
	// handler starts and removed with its history record). Empty with WithHistorySize(0).
	Running []InFlight
}

// InFlight is an attempt under way somewhere in the cluster, as the lock nodes know it.
type InFlight struct {
	// Tick is the tick's instant, or when the manual run was asked for; Trigger the manual
	// run's id, empty for a tick.
	Tick    time.Time
	Trigger string
	// Attempt is the attempt's number at its tick, from 1.
	Attempt int
	// Replica is the replica running it.
	Replica string
	// Start is when its handler started.
	Start time.Time
	// Token is its fencing token.
	Token uint64
}

// Status returns what the cluster knows of the job named name: its pause, its last runs and
// its runs in flight, read from the lock nodes in one request per node (the job's keys share
// its hash tag). On a Scheduler's Control, its Entry is the job's entry, as Scheduler.Entries
// has it; a NewControl's knows no entries and sets only the Entry's Name (a name that no
// scheduler runs is read like any other: what the nodes hold of it, if anything).
//
// It returns an error matching ErrUnknownJob if c is a Scheduler's Control and no job of that
// name is registered there, and one matching redlock.ErrQuorumUnavailable if fewer than a
// quorum of nodes answered.
func (c *Control) Status(ctx context.Context, name string) (Status, error) {
	e := Entry{Name: name}
	if c.sched != nil {
		entries := c.sched.Entries()
		i := slices.IndexFunc(entries, func(e Entry) bool { return e.Name == name })
		if i < 0 {
			return Status{}, fmt.Errorf("%w: %q", ErrUnknownJob, name)
		}
		e = entries[i]
	}
	return c.status(ctx, e)
}

// status returns Status for the job of entry e.
func (c *Control) status(ctx context.Context, e Entry) (Status, error) {
	st := Status{Entry: e}
	name := e.Name
	keys := []string{layout.PauseKey(c.cfg.prefix, name), layout.HistoryKey(c.cfg.prefix, name), layout.RunningKey(c.cfg.prefix, name)}
	replies, err := lockseam.Broadcast(c.locks, ctx, statusScript, keys, max(c.cfg.historySize, 1))
	if err != nil {
		return st, fmt.Errorf("scheduler: status of %q: %w", name, err)
	}
	pauses, histories, running := make([]any, len(replies)), make([]any, len(replies)), make([]any, len(replies))
	for i, r := range replies {
		if parts, ok := r.([]any); ok && len(parts) == 3 {
			pauses[i], histories[i], running[i] = parts[0], parts[1], parts[2]
		}
	}
	st.Paused = c.pause(pauses)
	st.History = mergeHistory(name, histories, max(c.cfg.historySize, 1))
	st.Running = c.mergeInFlight(running)
	var counted Record // the run of the last failure counted
	for _, r := range st.History {
		if r.Outcome == outcome.SkippedPaused {
			continue
		}
		if st.LastRun == nil {
			st.LastRun = &r
		}
		switch r.Outcome {
		case outcome.Ran:
			st.LastSuccess = &r
			return st, nil
		case outcome.Failed, outcome.LeaseLost, outcome.Interrupted:
			if st.Failures == 0 || !r.Tick.Equal(counted.Tick) || r.Trigger != counted.Trigger {
				st.Failures++
			}
			counted = r
		}
	}
	return st, nil
}

// pause returns the pause that a quorum of the nodes' replies to a GET of the pause key hold
// (nil for a node that did not answer or has none); nil if fewer than a quorum hold one.
func (c *Control) pause(replies []any) *job.Pause {
	var votes int
	var value string
	for _, r := range replies {
		if v, ok := r.(string); ok {
			votes, value = votes+1, v
		}
	}
	if votes < lockseam.Quorum(c.locks) {
		return nil
	}
	p := layout.ParsePause(value)
	return &p
}

// traceID returns the id of the trace that ctx's span belongs to (32 hex digits), or "" when
// ctx carries no valid span — e.g. the handler's context under middleware.Trace: the tick's
// trace.
func traceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}
