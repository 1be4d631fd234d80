package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// DefaultPrefix is the default prefix of lock keys.
const DefaultPrefix = "cronlock"

// DefaultKeepDone is the default LockConfig.KeepDone: how long a tick that ran is kept as done.
const DefaultKeepDone = time.Minute

// TickKey returns the lock key of one tick of a job: {prefix:name}:tick:<unix ms>. The hash
// tag {prefix:name} keeps every key of a job in one Redis Cluster slot.
func TickKey(prefix, name string, tick time.Time) string {
	return "{" + prefix + ":" + name + "}:tick:" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// RunKey returns the key that a running run of a job holds when its Overlap is Forbid:
// {prefix:name}:run.
func RunKey(prefix, name string) string { return "{" + prefix + ":" + name + "}:run" }

// TriggerKey returns the lock key of a manual run of a job, in place of the tick key:
// {prefix:name}:trigger:<id>. It is kept as done after the run, whatever its outcome: a
// manual run runs once.
func TriggerKey(prefix, name, id string) string { return "{" + prefix + ":" + name + "}:trigger:" + id }

// TriggersKey returns the key of the queue of manual runs asked for (scheduler.Trigger) of
// every job under prefix: {prefix}:triggers. One queue per prefix lets a replica look for new
// requests with one request per node, whatever its number of jobs.
func TriggersKey(prefix string) string { return "{" + prefix + "}:triggers" }

// FenceCounterKey returns the key of a job's fencing counter, shared by all its ticks so that tokens
// increase from tick to tick: {prefix:name}:fence.
func FenceCounterKey(prefix, name string) string { return "{" + prefix + ":" + name + "}:fence" }

// LockConfig configures Lock. The zero value of each field means its default.
type LockConfig struct {
	// Prefix starts every key (TickKey, RunKey, FenceCounterKey). Default "cronlock".
	Prefix string
	// TTL of the tick's lock. Default job.DefaultLockTTL (30s).
	TTL time.Duration
	// RenewEvery is how often the lease renews the lock. Default TTL/3.
	RenewEvery time.Duration
	// Overlap: with job.Forbid (the default) the run also takes the job's run key, so no two
	// runs of the job are ever running at once; with job.Allow only the tick key is taken.
	Overlap job.Overlap
	// KeepDone is how long a tick whose run succeeded is kept as done, so that replicas that
	// come late (clock skew, retries) see it done instead of running it again. Default 1 min.
	KeepDone time.Duration
	// BackOff returns a fresh schedule of waits between attempts while the nodes are
	// unavailable (ErrQuorumUnavailable). Default redlock.DefaultBackOff (10ms doubling to
	// 500ms, full jitter).
	BackOff func() backoff.BackOff
	// Clock tells the time for the tick's deadline (job.Run.Deadline). Default SystemClock.
	// Waits between attempts are on the real clock whatever this is: they wait for nodes and
	// racing replicas, not for ticks.
	Clock Clock
	// Limiter bounds the lock requests in flight at once; share one between the Locks of a
	// scheduler. Default nil: no bound. (The scheduler gives its jobs one, see
	// scheduler.WithLockConcurrency.)
	Limiter *Limiter
	// Logger receives the abnormal events, one line each at Warn: a lease renewal that failed,
	// a lock that could not be released or marked done. Default: slog.Default().
	Logger *slog.Logger
	// Stop, once closed, stops Lock from starting handlers: a wait for a limiter slot, the
	// nodes or a racing replica is given up at once, and a lock taken as Stop closes is
	// released without running the handler (checked after the lock is taken, right before the
	// handler), each with an error matching job.ErrStopped. Handlers already running are not
	// affected. The scheduler closes it when it is stopping. Default nil: never.
	Stop <-chan struct{}
}

func (c LockConfig) withDefaults() LockConfig {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.TTL == 0 {
		c.TTL = job.DefaultLockTTL
	}
	if c.RenewEvery == 0 {
		c.RenewEvery = c.TTL / 3
	}
	if c.KeepDone == 0 {
		c.KeepDone = DefaultKeepDone
	}
	if c.BackOff == nil {
		c.BackOff = redlock.DefaultBackOff
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrNoRun is returned by Lock when the context carries no job.Run: Lock needs the job's name
// and tick to name the lock.
var ErrNoRun = errors.New("middleware: no job.Run in the context: run the handler from a scheduler, or add one with job.NewContext")

// Lock runs the handler only on the one replica that takes the tick's lock, under the lock's
// lease.
//
// The lock is the tick key (TriggerKey for a manual run, job.Run.Trigger), with the job's run
// key too when Overlap is Forbid. A tick held by
// another replica, already done, or (Forbid) whose previous run still runs, and every tick
// while the job's PauseKey is on a quorum of the nodes, is skipped with a final
// *job.SkipError; refusals that may have split the vote, and run keys that may be leftovers
// of a failed attempt or of a release that missed a node, are looked at again first (the
// latter on every node; docs/scheduler.md). Unavailable nodes are
// retried on cfg.BackOff until the tick's deadline or ctx's end.
//
// The handler runs under the lease's context (cancelled with cause redlock.ErrLeaseLost before
// the lock could expire anywhere), with a job.Run whose FencingToken is set. On nil the tick is
// kept as done for cfg.KeepDone; on error it is released for a retry — except a manual run's,
// which is kept as done either way, and is not stopped by a pause. The error matches
// redlock.ErrLeaseLost if the lease was lost, unless the tick could still be marked done.
// Once cfg.Stop is closed, no handler starts (see LockConfig.Stop).
// Lock records spans and metrics when ctx carries Trace's span or Metrics' instruments.
func Lock(locks *redlock.Client, cfg LockConfig) Middleware {
	cfg = cfg.withDefaults()
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			run, ok := job.RunFrom(ctx)
			if !ok {
				return ErrNoRun
			}
			p := newLockProbe(ctx) // nil unless traced or measured
			actx, free := untilStop(ctx, cfg.Stop)
			l, err := cfg.acquire(actx, locks, run, p)
			free()
			if err != nil {
				if stopped(cfg.Stop) && !errors.Is(err, job.ErrSkipped) && !errors.Is(err, job.ErrStopped) {
					err = errors.Join(err, job.ErrStopped) // given up, whichever wait noticed first
				}
				return err
			}
			r := *run
			r.FencingToken = l.Token()
			lease, err := l.Lease(p.startRun(ctx, &r), cfg.leaseOptions(p, &r)...)
			if err != nil {
				p.endRun(err, false, nil, time.Time{})
				return errors.Join(err, l.Release(context.Background()))
			}
			finished := false
			defer func() {
				if !finished { // the handler panicked: release, and let the panic go on
					p.endRun(nil, true, lease.Err(), l.ValidUntil())
					cfg.release(lease, &r, false, p)
				}
			}()
			herr := errNotStarted
			if !stopped(cfg.Stop) { // checked last: no handler starts once Stop is closed
				herr = next(job.NewContext(lease.Context(), &r))
			}
			finished = true
			err = cfg.finish(lease, &r, herr, p)
			p.done(err)
			return err
		}
	}
}

// errNotStarted is the error of a tick whose lock was taken as LockConfig.Stop closed.
var errNotStarted = fmt.Errorf("%w: the tick's lock was released without running the handler", job.ErrStopped)

// maxSplitRetries bounds the attempts that redlock makes again after a split vote
// (redlock.ResolveSplits), and maxOverlapRechecks those made again after the run key was found
// held.
const (
	maxSplitRetries    = 5
	maxOverlapRechecks = 2
)

// acquire takes the tick's lock, reporting each attempt to p.
func (c LockConfig) acquire(ctx context.Context, locks *redlock.Client, run *job.Run, p *lockProbe) (*redlock.Lock, error) {
	tickKey, runKey := TickKey(c.Prefix, run.Job, run.Tick), RunKey(c.Prefix, run.Job)
	opts := make([]redlock.AcquireOption, 0, 9) // room for every option below
	opts = append(opts, redlock.FenceKey(FenceCounterKey(c.Prefix, run.Job)), redlock.ResolveSplits(maxSplitRetries))
	if run.Trigger != "" {
		tickKey = TriggerKey(c.Prefix, run.Job, run.Trigger) // an operator's run: a pause does not stop it
	} else {
		opts = append(opts, redlock.RefuseWhile(PauseKey(c.Prefix, run.Job)))
	}
	if run.Replica != "" {
		opts = append(opts, redlock.Label(run.Replica))
	}
	if p != nil {
		p.tickKey = tickKey
		// The tick span's context, for the replicas that will be refused to link to.
		if md := p.metadata(); md != "" {
			opts = append(opts, redlock.Metadata(md))
		}
	}
	if c.Overlap == job.Forbid {
		opts = append(opts, redlock.Also(runKey))
	}
	var (
		b        backoff.BackOff
		lastErr  error // the last ErrQuorumUnavailable
		rechecks int
		settle   time.Duration // added to the next wait
		last     redlock.Attempt
	)
	opts = append(opts, redlock.OnAttempt(func(a redlock.Attempt) { last = a; p.attempt(a) }))
	base := len(opts)
	for {
		now := c.Clock.Now()
		if !run.Deadline.IsZero() && !now.Before(run.Deadline) {
			if lastErr != nil {
				return nil, fmt.Errorf("tick %s of job %q: window closed while the lock nodes were unavailable: %w", run.Tick.Format(time.RFC3339Nano), run.Job, lastErr)
			}
			return nil, &job.SkipError{Reason: job.SkipLate}
		}
		if err := c.Limiter.wait(ctx); err != nil {
			return nil, err
		}
		opts = opts[:base]
		if rechecks > 0 {
			// The run key may be left on the lock's primary node, whose refusal alone ends a
			// contended attempt: ask every node.
			opts = append(opts, redlock.AskEveryNode())
		}
		if !run.Deadline.IsZero() {
			// No attempt, first or after a split vote, starts after the tick's window; the
			// window is on c.Clock, redlock counts in real time.
			opts = append(opts, redlock.StartBefore(time.Now().Add(run.Deadline.Sub(now))))
		}
		p.beginAttempt()
		l, err := locks.TryAcquire(ctx, tickKey, c.TTL, opts...)
		p.endAttempt(err) // if the attempt was refused before it was made
		c.Limiter.done()
		if err == nil {
			return l, nil
		}
		if ae, ok := errors.AsType[*redlock.AcquireError](err); ok && errors.Is(err, redlock.ErrNotAcquired) {
			se := skip(ae, runKey, err)
			// A run key found held may be the leftover of another tick's failed attempt (a
			// replica whose clock is behind, refused that tick as done on the other nodes), or
			// of a release that missed a node: look again, on every node, once it had time to
			// be released.
			done := se.Holder != nil && se.Holder.Done // done, or skipped and marked
			if done || se.Reason != job.SkipOverlap || rechecks == maxOverlapRechecks || ctx.Err() != nil {
				if !done && se.Reason == job.SkipOverlap && run.Trigger == "" { // a manual run waits instead
					c.markSkipped(ctx, locks, run, tickKey)
				}
				return nil, se
			}
			rechecks++
			c.Logger.Debug("cronlock: looking at the run key again", "job", run.Job, "tick", run.Tick, "replica", run.Replica,
				"ok", ae.OK, "refused", ae.Refused, "holder", se.Holder)
			// Let the failed attempt be released before the next one, or it could be refused by
			// its own leftover: the release was sent when the attempt failed, takes about as
			// long as an attempt, and is over within the node timeout.
			settle = min(2*last.Elapsed+time.Millisecond, locks.NodeTimeout(c.TTL))
		} else if errors.Is(err, redlock.ErrQuorumUnavailable) && ctx.Err() == nil {
			lastErr = err
		} else if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			continue // the window closed just before the attempt: skipped as late above
		} else {
			return nil, err
		}
		if b == nil {
			b = c.BackOff()
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			return nil, err
		}
		wait, settle = wait+settle, 0
		if !run.Deadline.IsZero() {
			wait = max(min(wait, run.Deadline.Sub(c.Clock.Now())), 0)
		}
		// Real time, whatever the clock: this waits for racers and nodes, not for ticks.
		if !sleep(SystemClock(), wait, ctx.Done()) {
			return nil, errors.Join(err, context.Cause(ctx))
		}
	}
}

// SkippedMarker is the metadata of a tick kept as done because it was skipped while a previous
// run of its job was running (Overlap Forbid): replicas that come later find it done, with
// this metadata, and skip it too (skipped_overlap) instead of running it late.
const SkippedMarker = "cronlock:skipped:overlap"

// markSkipped keeps the tick as done with SkippedMarker, so that replicas whose clocks are
// behind do not run it late — a late run would hold the run key when this replica's next
// tick comes, and skip that one in turn. Best effort: if the tick is taken meanwhile, the
// taker decides.
func (c LockConfig) markSkipped(ctx context.Context, locks *redlock.Client, run *job.Run, tickKey string) {
	opts := []redlock.AcquireOption{redlock.FenceKey(FenceCounterKey(c.Prefix, run.Job)), redlock.Metadata(SkippedMarker)}
	if run.Replica != "" {
		opts = append(opts, redlock.Label(run.Replica))
	}
	if c.Limiter.wait(ctx) != nil {
		return
	}
	defer c.Limiter.done()
	l, err := locks.TryAcquire(ctx, tickKey, c.TTL, opts...)
	if err != nil {
		return
	}
	if err := l.Release(context.Background(), redlock.KeepDone(c.KeepDone)); err != nil {
		c.Logger.Warn("cronlock: could not mark a skipped tick", "job", run.Job, "tick", run.Tick, "err", err)
	}
}

// skip turns a refusal into a *job.SkipError with its reason.
func skip(ae *redlock.AcquireError, runKey string, err error) *job.SkipError {
	se := &job.SkipError{Reason: job.SkipHeld, Err: err}
	if ae.Refusal != nil {
		p := ParsePause(ae.Refusal.Value)
		se.Reason, se.Pause = job.SkipPaused, &p
		return se
	}
	if h := ae.Holder; h != nil {
		se.Holder = &job.Holder{Key: h.Key, Label: h.Label, Metadata: h.Metadata, Done: h.Done}
		switch {
		case h.Done && h.Metadata == SkippedMarker:
			se.Reason = job.SkipOverlap
		case h.Done:
			se.Reason = job.SkipDone
		case h.Key == runKey:
			se.Reason = job.SkipOverlap
		}
	}
	return se
}

// leaseOptions returns the options of a run's lease: the renewal interval, and a hook that
// reports each renewal to p and logs the failed ones.
func (c LockConfig) leaseOptions(p *lockProbe, run *job.Run) []redlock.LeaseOption {
	opts := append(make([]redlock.LeaseOption, 0, 2), redlock.RenewEvery(c.RenewEvery))
	logger := c.Logger
	if p == nil && !logger.Enabled(context.Background(), slog.LevelWarn) {
		return opts
	}
	return append(opts, redlock.OnRenew(func(rn redlock.Renewal) {
		p.renewal(rn)
		if rn.Err != nil {
			logger.Warn("cronlock: lease renewal failed", "job", run.Job, "tick", run.Tick, "token", run.FencingToken,
				"renewal", rn.Number, "err", rn.Err)
		}
	}))
}

// finish closes the lease after the handler returned herr, and returns the run's error.
func (c LockConfig) finish(lease *redlock.Lease, run *job.Run, herr error, p *lockProbe) error {
	lost := lease.Err() // nil while the lease holds
	leaseLost := errors.Is(lost, redlock.ErrLeaseLost)
	p.endRun(herr, false, lost, lease.Lock().ValidUntil())
	if herr == nil {
		cerr := c.release(lease, run, true, p)
		switch {
		case cerr == nil:
			// Marked done on a quorum: our value was on a quorum all along, so the run was
			// the only one, even if the lease gave up early.
			return nil
		case leaseLost:
			return fmt.Errorf("job %q finished tick %s after its lease was lost (%w); marking it done failed: %w",
				run.Job, run.Tick.Format(time.RFC3339Nano), lost, cerr)
		}
		return nil // the run succeeded; release logged why the tick could not be marked done
	}
	c.release(lease, run, run.Trigger != "", p) // a manual run is done even if it failed
	if leaseLost && !errors.Is(herr, redlock.ErrLeaseLost) {
		return fmt.Errorf("%w (%w)", herr, lost)
	}
	return herr
}

// release closes the lease, keeping the tick as done or not, and logs a failure.
//
// The context is a fresh one that is never cancelled: each node's request is bounded by the
// lock client's node timeout anyway, and Release returns once a quorum answered while the
// requests to the other nodes go on under this context — cancelling it on return (the usual
// defer cancel()) would abort them and leave the lock on those nodes until its TTL.
func (c LockConfig) release(lease *redlock.Lease, run *job.Run, done bool, p *lockProbe) error {
	ctx := context.Background()
	var err error
	p.startRelease(done)
	if done {
		err = lease.Close(ctx, redlock.KeepDone(c.KeepDone))
	} else {
		err = lease.Close(ctx)
	}
	p.endRelease(err)
	if err != nil {
		msg := "cronlock: could not release tick; its lock expires after its TTL"
		if done {
			msg = "cronlock: could not mark tick done; its lock expires after its TTL"
		}
		c.Logger.Warn(msg, "job", run.Job, "tick", run.Tick, "token", run.FencingToken, "err", err)
	}
	return err
}
