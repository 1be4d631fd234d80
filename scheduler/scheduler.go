package scheduler

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// Errors of the Scheduler's methods, matched with errors.Is.
var (
	// ErrStopped: the scheduler was stopped; it takes no jobs and cannot start again.
	// Also the cause with which running jobs' contexts are cancelled when Stop's context
	// ends.
	ErrStopped = errors.New("scheduler: stopped")
	// ErrStarted: Start was called twice.
	ErrStarted = errors.New("scheduler: already started")
	// ErrDuplicate: a job of that name is registered already.
	ErrDuplicate = errors.New("scheduler: duplicate job name")
	// ErrUnknownJob: no job of that name is registered.
	ErrUnknownJob = errors.New("scheduler: no such job")
)

// Entry describes a registered job.
type Entry struct {
	Name string
	Spec string
	// Next is the next tick the scheduler will fire (zero if the spec has no more ticks).
	// Before Start it is computed from the current time.
	Next time.Time
	// Prev is the last tick this scheduler fired (whatever its outcome on this replica), zero
	// if none.
	Prev time.Time
}

// Scheduler runs registered jobs at their ticks, each tick on one replica of the cluster. It
// is safe for concurrent use.
type Scheduler struct {
	locks *redlock.Client
	cfg   config

	mu      sync.Mutex
	entries map[string]*entry
	queue   entryHeap
	state   state

	wake     chan struct{} // the queue changed
	stop     chan struct{} // closed by Stop
	stopOnce sync.Once
	loopDone chan struct{} // closed when the loop exits
	pollNow  chan struct{} // Trigger asks the trigger poller to look at once
	pollDone chan struct{} // closed when the trigger poller exits

	triggered map[string]bool // manual runs under way here, by queue member; guarded by mu

	runs       sync.WaitGroup
	runCtx     context.Context
	cancelRuns context.CancelCauseFunc
	limiter    *middleware.Limiter // shared by the jobs' Lock middleware
}

type state int

const (
	idle state = iota
	running
	stopped
)

type entry struct {
	job      job.Job // with defaults applied
	sched    cron.Schedule
	handler  job.Handler // the whole chain
	keepDone time.Duration
	next     time.Time
	prev     time.Time
	index    int // in the queue; -1 when not queued
}

// New returns a Scheduler that guards ticks with locks taken from locks. Add jobs, then
// Start it; Stop it to release everything.
func New(locks *redlock.Client, opts ...Option) (*Scheduler, error) {
	if locks == nil {
		return nil, errors.New("scheduler: the redlock client is nil: give one made by redlock.New over the lock nodes")
	}
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("scheduler: option %d is nil", i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	if err := cfg.finish(); err != nil {
		return nil, err
	}
	var err error
	s := &Scheduler{
		locks:   locks,
		cfg:     cfg,
		entries: make(map[string]*entry),
		wake:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		pollNow: make(chan struct{}, 1),

		triggered: make(map[string]bool),
	}
	s.runCtx, s.cancelRuns = context.WithCancelCause(context.Background())
	if s.limiter, err = middleware.NewLimiter(cfg.lockConc); err != nil {
		return nil, err
	}
	return s, nil
}

// Replica returns the replica's name (WithReplica).
func (s *Scheduler) Replica() string { return s.cfg.replica }

// Add registers j. It returns an error matching job.ErrInvalid that names the field and the fix
// when j cannot work (see job.Job.Validate; also an unparsable spec, a spec that never fires,
// a LockTTL the lock client refuses), ErrDuplicate (and job.ErrInvalid) when the name is taken,
// and ErrStopped after Stop. On error nothing is registered. Jobs may be added before or after
// Start; the first tick is the first one after the call (or after Start).
func (s *Scheduler) Add(j job.Job) error {
	if s.isStopped() {
		return fmt.Errorf("%w: cannot add job %q", ErrStopped, j.Name)
	}
	e, err := s.prepare(j)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == stopped:
		return fmt.Errorf("%w: cannot add job %q", ErrStopped, j.Name)
	case s.entries[j.Name] != nil:
		return &job.InvalidError{Job: j.Name, Field: "Name", Err: ErrDuplicate,
			Problem: "is already registered: give each job its own name, or Remove the old one first"}
	}
	e.next = e.sched.Next(s.cfg.clock.Now())
	s.entries[j.Name] = e
	if !e.next.IsZero() {
		heap.Push(&s.queue, e)
	}
	s.poke()
	return nil
}

// prepare validates j and builds its entry.
func (s *Scheduler) prepare(j job.Job) (*entry, error) {
	if err := j.Validate(); err != nil {
		return nil, err
	}
	sched, err := ParseSpec(j.Spec, s.cfg.loc)
	if err != nil {
		ie := &job.InvalidError{Job: j.Name, Field: "Spec", Problem: err.Error(), Err: err}
		if se, ok := errors.AsType[*SpecError](err); ok {
			ie.Problem = fmt.Sprintf("%q: %s; %s", se.Spec, se.Problem, specExamples)
		}
		return nil, ie
	}
	if sched.Next(s.cfg.clock.Now()).IsZero() {
		return nil, &job.InvalidError{Job: j.Name, Field: "Spec",
			Problem: fmt.Sprintf("%q never fires: no matching time in the next five years (a date such as 30 February?)", j.Spec)}
	}
	j.Options = j.Options.WithDefaults()
	if err := s.locks.CheckTTL(j.LockTTL); err != nil {
		return nil, &job.InvalidError{Job: j.Name, Field: "Options.LockTTL", Problem: err.Error(), Err: err}
	}
	o := j.Options
	keepDone := max(s.cfg.retention, o.CatchUp+2*s.cfg.maxSkew+time.Second)
	chain := append(slices.Clone(s.cfg.middleware),
		middleware.Retry(middleware.RetryPolicy{Retries: o.Retries, BackOff: o.RetryBackOff, Clock: s.cfg.clock}),
		middleware.Lock(s.locks, middleware.LockConfig{
			Prefix: s.cfg.prefix, TTL: o.LockTTL, RenewEvery: o.RenewEvery, Overlap: o.Overlap, MaxAttempts: o.Retries + 1,
			KeepDone: keepDone, Clock: s.cfg.clock, Logger: s.cfg.logger, Limiter: s.limiter,
		}),
		record,
		middleware.Timeout(o.Timeout),
		middleware.Recover(),
	)
	return &entry{job: j, sched: sched, handler: middleware.Chain(chain...)(j.Handler), keepDone: keepDone, index: -1}, nil
}

// Remove unregisters the job named name: it fires no more ticks. A run of it that is under
// way goes on (Stop waits for it). It returns an error matching ErrUnknownJob if no such job
// is registered.
func (s *Scheduler) Remove(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.entries[name]
	if e == nil {
		return fmt.Errorf("%w: %q", ErrUnknownJob, name)
	}
	delete(s.entries, name)
	if e.index >= 0 {
		heap.Remove(&s.queue, e.index)
	}
	s.poke()
	return nil
}

// Entries returns the registered jobs, sorted by name.
func (s *Scheduler) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.entries))
	for _, e := range s.entries {
		out = append(out, Entry{Name: e.job.Name, Spec: e.job.Spec, Next: e.next, Prev: e.prev})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Start starts firing ticks, in a goroutine of the scheduler's; it does not block. Each job's
// first tick is the first one after now, except for jobs with a CatchUp window: the newest
// tick within it runs at once, unless a replica already ran it. It returns ErrStarted if
// called twice and ErrStopped after Stop.
func (s *Scheduler) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case running:
		return ErrStarted
	case stopped:
		return fmt.Errorf("%w: a stopped scheduler cannot start again; make a new one", ErrStopped)
	}
	s.state = running
	now := s.cfg.clock.Now()
	s.queue = s.queue[:0]
	for _, e := range s.entries {
		e.next = e.sched.Next(now)
		e.index = -1
		if !e.next.IsZero() {
			s.queue = append(s.queue, e)
			e.index = len(s.queue) - 1
		}
	}
	heap.Init(&s.queue)
	for _, e := range s.entries {
		if e.job.CatchUp > 0 {
			if t, ok := newestTick(e.sched, now.Add(-e.job.CatchUp), now); ok {
				s.cfg.logger.Info("cronlock: catching up a missed tick", "job", e.job.Name, "tick", t)
				e.prev = t
				s.launch(e, t, e.next)
			}
		}
	}
	select { // the queue was just rebuilt: changes made before Start need no wake-up
	case <-s.wake:
	default:
	}
	s.loopDone = make(chan struct{})
	s.pollDone = make(chan struct{})
	go s.loop()
	go s.pollTriggers()
	return nil
}

// newestTick returns the newest tick of sched in [from, to].
func newestTick(sched cron.Schedule, from, to time.Time) (time.Time, bool) {
	if ev, ok := sched.(EverySchedule); ok {
		d := int64(ev.Interval)
		t := time.Unix(0, to.UnixNano()/d*d)
		return t, !t.Before(from)
	}
	var last time.Time
	for t, n := sched.Next(from.Add(-time.Nanosecond)), 0; !t.IsZero() && !t.After(to) && n < 100000; t, n = sched.Next(t), n+1 {
		last = t
	}
	return last, !last.IsZero()
}

// poke wakes the loop, without blocking.
func (s *Scheduler) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *Scheduler) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state == stopped
}

// loop fires due ticks, then waits for the earliest next tick, a change of the queue, or Stop.
func (s *Scheduler) loop() {
	defer close(s.loopDone)
	for {
		s.mu.Lock()
		now := s.cfg.clock.Now()
		s.fireDue(now)
		var timer Timer
		var fire <-chan time.Time
		if len(s.queue) > 0 {
			timer = s.cfg.clock.NewTimer(s.queue[0].next.Sub(now))
			fire = timer.C()
		}
		s.mu.Unlock()
		select {
		case <-fire:
		case <-s.wake:
		case <-s.stop:
		}
		if timer != nil {
			timer.Stop()
		}
		select {
		case <-s.stop:
			return
		default:
		}
	}
}

// fireDue launches a run for each entry whose next tick has come; s.mu must be held. When the
// loop fell behind (a paused process, a clock that jumped), only the newest due tick of a job
// fires: older ones are missed.
func (s *Scheduler) fireDue(now time.Time) {
	if s.state != running {
		return
	}
	for len(s.queue) > 0 && !s.queue[0].next.After(now) {
		e := s.queue[0]
		tick := e.next
		next := e.sched.Next(tick)
		missed := 0
		for !next.IsZero() && !next.After(now) && missed < 100000 {
			tick, next = next, e.sched.Next(next)
			missed++
		}
		if !next.IsZero() && !next.After(now) { // very far behind: skip to now
			next = e.sched.Next(now)
		}
		if missed > 0 {
			s.cfg.logger.Warn("cronlock: missed ticks: the scheduler fell behind", "job", e.job.Name, "missed", missed, "running", tick)
		}
		e.prev, e.next = tick, next
		if next.IsZero() {
			heap.Pop(&s.queue)
		} else {
			heap.Fix(&s.queue, 0)
		}
		s.launch(e, tick, next)
	}
}

// launch runs tick of e in a goroutine owned by the scheduler; s.mu must be held.
func (s *Scheduler) launch(e *entry, tick, next time.Time) {
	deadline := tick.Add(e.keepDone - 2*s.cfg.maxSkew)
	if !next.IsZero() && next.Before(deadline) {
		deadline = next
	}
	run := &job.Run{Job: e.job.Name, Tick: tick, Attempt: 1, Replica: s.cfg.replica, Deadline: deadline}
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		_ = s.runHandler(e, run)
	}()
}

// report logs the outcome of a tick on this replica.
func (s *Scheduler) report(run *job.Run, err error) {
	outcome := middleware.Outcome(err)
	level := slog.LevelDebug
	switch outcome {
	case middleware.OutcomeFailed, middleware.OutcomeLeaseLost, middleware.OutcomeQuorumUnavailable:
		level = slog.LevelWarn
	case middleware.OutcomeSkippedPaused:
		level = slog.LevelInfo
	}
	ctx := context.Background()
	if !s.cfg.logger.Enabled(ctx, level) {
		return
	}
	attrs := []any{"job", run.Job, "tick", run.Tick, "outcome", outcome}
	if run.Trigger != "" {
		attrs = append(attrs, "trigger", run.Trigger)
	}
	if se, ok := errors.AsType[*job.SkipError](err); ok && se.Pause != nil {
		attrs = append(attrs, "reason", se.Pause.Reason, "paused_since", se.Pause.Since, "paused_by", se.Pause.By)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	s.cfg.logger.Log(ctx, level, "cronlock: tick", attrs...)
}

// Stop stops the scheduler: no new ticks fire (nor do retries of failed ones start after ctx
// ends), runs under way go on until they return or ctx ends, and then their contexts are
// cancelled with cause ErrStopped. Every run releases its lock as it ends. Stop returns when
// every goroutine of the scheduler has exited: nil if the runs finished in time, else an error
// with ctx's error and cause. A job that ignores its context keeps Stop waiting.
//
// Stop may be called more than once, and before Start; the scheduler cannot start again.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.state = stopped
	loopDone, pollDone := s.loopDone, s.pollDone
	s.mu.Unlock()
	s.stopOnce.Do(func() { close(s.stop) })
	if loopDone != nil {
		<-loopDone
		<-pollDone
	}
	done := make(chan struct{})
	go func() {
		s.runs.Wait()
		close(done)
	}()
	defer s.cancelRuns(ErrStopped) // nothing left to cancel; frees the context
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	s.cancelRuns(fmt.Errorf("%w: Stop's context ended before the run finished", ErrStopped))
	<-done
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != err {
		err = errors.Join(err, cause)
	}
	return fmt.Errorf("scheduler: stop: running jobs were cancelled: %w", err)
}
