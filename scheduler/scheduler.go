package scheduler

import (
	"cmp"
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

	"github.com/cronlock/cronlock/internal/jobseam"
	"github.com/cronlock/cronlock/internal/limiter"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
)

// Errors of the Scheduler's methods, matched with errors.Is.
var (
	// ErrStopped: the scheduler was stopped; it takes no jobs and cannot start again.
	// Also matched (with job.ErrStopped) by the cause with which running jobs' contexts are
	// cancelled when Stop's context ends.
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
	// Schedule is the spec the ticks are computed from: Spec with its H forms resolved from
	// the job's name (see the package doc, "Specs"); Spec itself when it has no H.
	Schedule string
	// Jitter is the job's Options.Jitter: each tick starts up to this much after its instant.
	Jitter time.Duration
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
	ctl   *Control // the control of its jobs, with the same options (Control)

	mu      sync.Mutex
	entries map[string]*entry
	queue   entryHeap
	state   state

	wake     chan struct{}      // the queue changed
	stopping context.Context    // ended by Stop
	halt     context.CancelFunc // ends stopping
	stop     <-chan struct{}    // stopping.Done()
	loopDone chan struct{}      // closed when the loop exits
	pollNow  chan struct{}      // Trigger asks the trigger poller to look at once
	pollDone chan struct{}      // closed when the trigger poller exits
	// rescueDone is closed when the rescuer of interrupted runs (rescueRuns) exits.
	rescueDone chan struct{}

	triggered map[string]bool // manual runs under way here, by queue member; guarded by mu

	active      map[*recorder]bool // the runs under way; guarded by mu
	runsChanged chan struct{}      // closed and replaced when a run ends; guarded by mu
	runs        sync.WaitGroup     // the runs' goroutines
	runCtx      context.Context
	cancelRuns  context.CancelCauseFunc
	limiter     *limiter.Limiter // shared by the jobs' Lock middleware

	configHash string             // setConfigHash's; guarded by mu
	beatNow    chan struct{}      // asks the heartbeat goroutine for a heartbeat now
	endBeats   context.CancelFunc // ends the heartbeat goroutine and its requests
	beatDone   chan struct{}      // closed when the heartbeat goroutine exits
	seen       []Replica          // the replicas as the last heartbeat read them; guarded by mu
	seenAt     time.Time          // when; guarded by mu
	beatFailed bool               // the last heartbeat failed; guarded by mu
	left       bool               // Stop removed the replica's entry; guarded by mu
	// offset is where this replica starts a burst among the jobs' hashes (fireDue): its share
	// of the circle among the replicas the last heartbeat saw (burstOffset); guarded by mu.
	offset uint32
	due    []dueTick // fireDue's, reused
}

type state int

const (
	idle state = iota
	running
	stopped
)

type entry struct {
	job      job.Job // with defaults applied
	schedule string  // the spec with H resolved
	sched    cron.Schedule
	handler  job.Handler // the whole chain
	keepDone time.Duration
	next     time.Time // the next tick
	at       time.Time // when the next tick starts: next plus its jitter delay
	prev     time.Time
	missed   int64  // ticks not fired because the loop fell behind (fireDue)
	index    int    // in the queue; -1 when not queued
	hash     uint32 // of the job's name: where it comes in a burst (fireDue)
}

// New returns a Scheduler that guards ticks with locks taken from locks. Add jobs, then
// Start it; Stop it to release everything.
func New(locks *redlock.Client, opts ...Option) (*Scheduler, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	ctl, err := newControl(locks, cfg)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		locks:   locks,
		cfg:     cfg,
		ctl:     ctl,
		entries: make(map[string]*entry),
		wake:    make(chan struct{}, 1),
		pollNow: make(chan struct{}, 1),
		beatNow: make(chan struct{}, 1),

		triggered:   make(map[string]bool),
		active:      make(map[*recorder]bool),
		runsChanged: make(chan struct{}),
		offset:      burstOffset(cfg.replica, nil),
	}
	ctl.sched = s
	s.stopping, s.halt = context.WithCancel(context.Background())
	s.stop = s.stopping.Done()
	// Each run's Lock and Retry find stopping in its context: they wait for Stop without a
	// goroutine per run.
	s.runCtx, s.cancelRuns = context.WithCancelCause(schedseam.WithStopping(context.Background(), s.stopping))
	if s.limiter, err = limiter.New(cfg.lockConc); err != nil {
		return nil, err
	}
	return s, nil
}

// Add registers j. It returns an error matching job.ErrInvalid that names the field and the fix
// when j cannot work (see job.Job.Validate; also an unparsable spec, a spec that never fires,
// a LockTTL the lock client refuses), ErrDuplicate (and job.ErrInvalid) when the name is taken,
// and ErrStopped after Stop. On error nothing is registered. Jobs may be added before or after
// Start; the first tick is the first one after the call (or after Start), or, with
// Options.Jitter, one whose delayed start is still to come.
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
	s.setNext(e, s.firstTick(e, s.cfg.clock.Now()))
	s.entries[j.Name] = e
	if !e.next.IsZero() {
		heap.Push(&s.queue, e)
	}
	s.poke()
	s.beatSoon()
	return nil
}

// checked is a job that checkJob accepted: the job with its options' defaults applied, its
// spec with H resolved, and its schedule.
type checked struct {
	job      job.Job
	schedule string
	sched    cron.Schedule
}

// checkJob checks j as Add does, for a scheduler whose lock client is locks, in loc, at now:
// Job.Validate; its spec, resolved and parsed, must fire; its lock TTL, which locks must
// accept; and its jitter, which must be shorter than the time between its ticks. Each error is
// a *job.InvalidError naming the field.
func checkJob(locks *redlock.Client, loc *time.Location, now time.Time, j job.Job) (checked, error) {
	if err := j.Validate(); err != nil {
		return checked{}, err
	}
	schedule, err := resolveSpec(j.Spec, j.Name)
	var sched cron.Schedule
	if err == nil {
		sched, err = ParseSpec(schedule, loc)
	}
	if err != nil {
		ie := &job.InvalidError{Job: j.Name, Field: "Spec", Problem: err.Error(), Err: err}
		if se, ok := errors.AsType[*specError](err); ok {
			ie.Problem = fmt.Sprintf("%q: %s; %s", se.spec, se.problem, specExamples)
		}
		return checked{}, ie
	}
	if sched.Next(now).IsZero() {
		return checked{}, &job.InvalidError{Job: j.Name, Field: "Spec",
			Problem: fmt.Sprintf("%q never fires: no matching time in the next five years (a date such as 30 February?)", j.Spec)}
	}
	j.Options = jobseam.WithDefaults(j.Options)
	if err := lockseam.CheckTTL(locks, j.LockTTL); err != nil {
		return checked{}, &job.InvalidError{Job: j.Name, Field: "Options.LockTTL", Problem: err.Error(), Err: err}
	}
	if err := checkJitter(j, schedule, sched, now); err != nil {
		return checked{}, err
	}
	return checked{job: j, schedule: schedule, sched: sched}, nil
}

// prepare validates j and builds its entry.
func (s *Scheduler) prepare(j job.Job) (*entry, error) {
	c, err := checkJob(s.locks, s.cfg.loc, s.cfg.clock.Now(), j)
	if err != nil {
		return nil, err
	}
	j, schedule, sched := c.job, c.schedule, c.sched
	o := j.Options
	keepDone := max(s.cfg.retention, max(o.CatchUp, o.Jitter)+2*s.cfg.maxSkew+time.Second)
	chain := append(slices.Clone(s.cfg.middleware),
		middleware.Retry(middleware.RetryPolicy{Retries: o.Retries, BackOff: o.RetryBackOff, Clock: s.cfg.clock, Stop: s.stop}),
		recordAttempts,
		middleware.Lock(s.locks, middleware.LockConfig{
			Prefix: s.cfg.prefix, TTL: o.LockTTL, RenewEvery: o.RenewEvery, Overlap: o.Overlap, MaxAttempts: o.Retries + 1,
			KeepDone: keepDone, Clock: s.cfg.clock, Logger: s.cfg.logger, Limiter: s.limiter, Stop: s.stop,
		}),
		record,
		middleware.Timeout(o.Timeout),
		middleware.Recover(),
	)
	return &entry{job: j, schedule: schedule, sched: sched, handler: middleware.Chain(chain...)(j.Handler), keepDone: keepDone, index: -1,
		hash: hash32(j.Name)}, nil
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
	s.beatSoon()
	return nil
}

// Entries returns the registered jobs, sorted by name.
func (s *Scheduler) Entries() []Entry {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Entry, 0, len(s.entries))
	now := s.cfg.clock.Now()
	for _, e := range s.entries {
		next := e.next
		if s.state == idle { // not firing yet: the next tick is the first one to start after now
			next = s.firstTick(e, now)
		}
		out = append(out, Entry{Name: e.job.Name, Spec: e.job.Spec, Schedule: e.schedule, Jitter: e.job.Jitter, Next: next, Prev: e.prev})
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Start starts firing ticks, in a goroutine of the scheduler's; it does not block. Each job's
// first tick is the first one after now (or one whose jitter delay has not passed yet),
// except for jobs with a CatchUp window: the newest tick within it runs at once, unless a
// replica already ran it. It returns ErrStarted if
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
		s.setNext(e, s.firstTick(e, now))
		e.index = -1
		if !e.next.IsZero() {
			s.queue = append(s.queue, e)
			e.index = len(s.queue) - 1
		}
	}
	heap.Init(&s.queue)
	for _, e := range s.entries {
		if e.job.CatchUp > 0 {
			// A tick whose jitter delay has not passed is not missed: it is e.next.
			if t, ok := newestTick(e.sched, now.Add(-e.job.CatchUp), now); ok && (e.next.IsZero() || t.Before(e.next)) {
				s.cfg.logger.Info("cronlock: catching up a missed tick", "job", e.job.Name, "tick", t)
				e.prev = t
				s.launch(e, t, e.next, now)
			}
		}
	}
	select { // the queue was just rebuilt: changes made before Start need no wake-up
	case <-s.wake:
	default:
	}
	s.loopDone = make(chan struct{})
	s.pollDone = make(chan struct{})
	s.rescueDone = make(chan struct{})
	s.beatDone = make(chan struct{})
	var beatCtx context.Context
	beatCtx, s.endBeats = context.WithCancel(context.Background())
	go s.loop()
	go s.pollTriggers()
	go s.rescueRuns()
	go s.heartbeat(beatCtx, now)
	return nil
}

// newestTick returns the newest tick of sched in [from, to].
func newestTick(sched cron.Schedule, from, to time.Time) (time.Time, bool) {
	if ev, ok := sched.(everySchedule); ok {
		d := int64(ev.interval)
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
		var timer middleware.Timer
		var fire <-chan time.Time
		if len(s.queue) > 0 {
			timer = s.cfg.clock.NewTimer(s.queue[0].at.Sub(now))
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

// fireDue launches a run for each entry whose next tick's start (its instant plus its jitter
// delay) has come; s.mu must be held. When the loop fell behind (a paused process, a clock
// that jumped), only the newest due tick of a job fires: older ones are missed.
func (s *Scheduler) fireDue(now time.Time) {
	if s.state != running {
		return
	}
	for len(s.queue) > 0 && !s.queue[0].at.After(now) {
		e := s.queue[0]
		tick, start := e.next, e.at
		next := e.sched.Next(tick)
		missed := 0
		for !next.IsZero() {
			ns := s.startOf(e, next)
			if ns.After(now) {
				break
			}
			if missed == 100000 { // very far behind: skip to now
				next = e.sched.Next(now)
				break
			}
			tick, start, next = next, ns, e.sched.Next(next)
			missed++
		}
		if missed > 0 {
			e.missed += int64(missed)
			s.cfg.logger.Warn("cronlock: missed ticks: the scheduler fell behind", "job", e.job.Name, "missed", missed, "running", tick)
		}
		e.prev = tick
		s.setNext(e, next)
		if next.IsZero() {
			heap.Pop(&s.queue)
		} else {
			heap.Fix(&s.queue, 0)
		}
		s.due = append(s.due, dueTick{e: e, tick: tick, next: next, start: start})
	}
	burstOrder(s.due, s.offset)
	for _, d := range s.due {
		s.launch(d.e, d.tick, d.next, d.start)
	}
	clear(s.due)
	s.due = s.due[:0]
}

// dueTick is a tick that fireDue found due: its entry, its instant, the entry's next tick,
// and when it starts.
type dueTick struct {
	e                 *entry
	tick, next, start time.Time
}

// burstOrder orders the ticks due together (a burst: many jobs on one spec) by their jobs'
// hashes from offset, where this replica's share of the circle begins (burstOffset): each
// replica claims first the jobs that the others claim last, and mostly wins different jobs.
func burstOrder(due []dueTick, offset uint32) {
	slices.SortFunc(due, func(a, b dueTick) int { return cmp.Compare(a.e.hash-offset, b.e.hash-offset) })
}

// hash32 is a hash of name spread over the whole circle (tickmath.Hash's high bits).
func hash32(name string) uint32 { return uint32(tickmath.Hash(name) >> 32) }

// burstOffset returns where replica starts a burst among the jobs' hashes: its rank among the
// names of the replicas alive (itself included) times an equal share of the circle, so that
// the replicas split a burst's jobs evenly between them; while it knows of no other replica,
// the hash of its own name.
func burstOffset(replica string, alive []Replica) uint32 {
	names := []string{replica}
	for _, r := range alive {
		if r.Alive && r.Name != replica {
			names = append(names, r.Name)
		}
	}
	if len(names) == 1 {
		return hash32(replica)
	}
	slices.Sort(names)
	rank := slices.Index(names, replica)
	return uint32(uint64(rank) << 32 / uint64(len(names)))
}

// firstTick returns the first tick of e that starts after now: the first one after now, or
// one at or before now whose jitter delay has not passed yet (a job added, or a scheduler
// started, during a tick's delay still runs the tick, as the other replicas do).
func (s *Scheduler) firstTick(e *entry, now time.Time) time.Time {
	t := e.sched.Next(now.Add(-e.job.Jitter)) // a tick's delay is below Jitter
	for !t.IsZero() && !s.startOf(e, t).After(now) {
		t = e.sched.Next(t)
	}
	return t
}

// setNext makes next the next tick of e, starting at its instant plus its jitter delay; it
// does not reorder the queue.
func (s *Scheduler) setNext(e *entry, next time.Time) {
	e.next, e.at = next, s.startOf(e, next)
}

// launch runs tick of e, planned to start at start, in a goroutine owned by the scheduler;
// next is the tick after it. s.mu must be held.
func (s *Scheduler) launch(e *entry, tick, next, start time.Time) {
	run := &job.Run{Job: e.job.Name, Tick: tick, PlannedStart: start, Attempt: 1, Replica: s.cfg.replica, Deadline: s.deadline(e, tick, next)}
	s.goRun(e, run, nil)
}

// goRun runs e's handler chain for run in a goroutine owned by the scheduler, then calls
// after (if not nil) with the chain's error; s.mu must be held.
func (s *Scheduler) goRun(e *entry, run *job.Run, after func(error)) {
	rec := &recorder{owner: s, run: run, keep: e.keepDone}
	s.active[rec] = true
	s.runs.Add(1)
	go func() {
		defer s.runs.Done()
		err := s.runHandler(e, run, rec)
		if after != nil {
			after(err)
		}
		s.mu.Lock()
		delete(s.active, rec)
		close(s.runsChanged)
		s.runsChanged = make(chan struct{})
		s.mu.Unlock()
	}()
}

// report logs the outcome of a tick on this replica; started says whether its handler ran.
func (s *Scheduler) report(run *job.Run, err error, started bool) {
	result := middleware.Outcome(err)
	level := slog.LevelDebug
	pe, panicked := errors.AsType[*middleware.PanicError](err)
	switch {
	case panicked:
		level = slog.LevelError
	case result == outcome.Failed, result == outcome.LeaseLost, result == outcome.QuorumUnavailable:
		level = slog.LevelWarn
	case result == outcome.SkippedPaused, result == outcome.Replaced, result == outcome.Stopped && started:
		level = slog.LevelInfo
	}
	ctx := context.Background()
	if !s.cfg.logger.Enabled(ctx, level) {
		return
	}
	attrs := []any{"job", run.Job, "tick", run.Tick, "outcome", result}
	if run.Trigger != "" {
		attrs = append(attrs, "trigger", run.Trigger)
	}
	if run.By != "" {
		attrs = append(attrs, "by", run.By)
	}
	if se, ok := errors.AsType[*job.SkipError](err); ok && se.Pause != nil {
		attrs = append(attrs, "reason", se.Pause.Reason, "paused_since", se.Pause.Since, "paused_by", se.Pause.By)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	if panicked {
		attrs = append(attrs, "stack", string(pe.Stack))
	}
	s.cfg.logger.Log(ctx, level, "cronlock: tick", attrs...)
}

// Stop stops the scheduler. From the moment it is called, no handler and no retry starts:
// ticks that are waiting — for a lock slot, for the lock nodes, for a retry — are given up at
// once with outcome stopped (job.ErrStopped), and a lock taken as Stop was called is released
// without running the handler, so that another replica may still run the tick within its
// window. Runs under way go on under their leases until they return or ctx ends; then their
// contexts are cancelled with a cause matching ErrStopped and job.ErrStopped, and they end
// with outcome stopped. Every run releases its lock as it ends.
//
// Stop returns nil once every run has ended and every goroutine of the scheduler has exited,
// if no running handler had to be cancelled. When ctx ends first, Stop cancels the runs and
// returns at once, without waiting for them — neither for a handler that ignores its context
// nor for the release and the record of a run that ended: its error matches ctx's error and
// cause, and names each run left under way with its job, tick (or manual run), attempt and
// phase: claiming (giving its tick up), running (its handler has not returned) or finishing
// (releasing its lock, writing its record). The scheduler still owns the runs left: each ends
// as soon as its handler returns, and a later Stop, with a new ctx, waits for them: nil once
// they have ended, or, if its ctx ends first, an error naming those still left. Closing the
// lock client while runs are left releases their locks under handlers that may still run; a
// program that exits instead may skip it: the runs end with the process, and their locks
// expire after their TTL.
//
// Past ctx's end, Stop waits only for the runs whose handler is not running — the ticks it
// gave up, and the runs releasing their locks and writing their records — and for at most a
// second from its call: with no handler running, Stop returns nil at once, whatever ctx (even
// one already ended) and whatever the lock nodes are doing, but for the marking of the
// replica stopped (below).
//
// From inside a handler, give Stop the handler's context, or one derived from it: Stop then
// does all of the above except wait for the calling run, which cannot end before Stop
// returns; that run ends when its handler returns, and a later Stop waits for it. Stop cannot
// recognize its caller by anything but ctx: given an unrelated context inside a handler, it
// waits for the calling run, which waits for Stop, until ctx ends.
//
// Last, Stop ends the replica's heartbeat and, once no run is left, marks the replica stopped
// on the lock nodes (Replicas no longer lists it: a replica that stopped is not missing),
// within ctx and at most a second; with ctx already ended, or when its last heartbeat failed
// (the nodes were out of reach), or with runs left that no later Stop waited for, it does not
// try, and the replica shows as missing until its entry expires.
//
// Stop may be called more than once, and before Start; the scheduler cannot start again.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.halt() // first: from here on, no handler or retry starts
	giveUp := time.NewTimer(giveUpWait)
	defer giveUp.Stop()
	s.mu.Lock()
	s.state = stopped
	loopDone, pollDone, rescueDone, beatDone := s.loopDone, s.pollDone, s.rescueDone, s.beatDone
	s.mu.Unlock()
	if loopDone != nil {
		<-loopDone
		<-pollDone
		<-rescueDone
	}
	own, _ := ctx.Value(recorderKey{}).(*recorder) // the run Stop is called from, if any
	if own != nil && own.owner != s {
		own = nil
	}
	err := s.drain(ctx, own, giveUp.C)
	left := runsLeft(err)
	if own == nil && !left {
		s.runs.Wait()
		s.cancelRuns(ErrStopped) // nothing left to cancel; frees the context
	}
	if beatDone != nil {
		s.endBeats()
		<-beatDone
		if !left { // not stopped yet: a later Stop marks it stopped once the runs left ended
			s.leave(ctx)
		}
	}
	return err
}
