package middleware

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/cronlock/cronlock/internal/jitter"
	"github.com/cronlock/cronlock/internal/jobseam"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/limiter"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// DefaultPrefix is the default prefix of lock keys.
const DefaultPrefix = "cronlock"

// defaultKeepDone is the default LockConfig.KeepDone: how long a tick that ran is kept as done.
const defaultKeepDone = time.Minute

// LockConfig configures Lock. The zero value of each field means its default.
type LockConfig struct {
	// Prefix starts every key of the job ({prefix:job}:tick:<unix ms>, {prefix:job}:run, and so
	// the job's fence counter {prefix:job}:fence). Default "cronlock".
	Prefix string
	// TTL of the tick's lock. Default 30s, as job.Options.LockTTL.
	TTL time.Duration
	// RenewEvery is how often the lease renews the lock. Default TTL/3.
	RenewEvery time.Duration
	// Overlap: with job.Forbid (the default) the run also takes the job's run key, so no two
	// runs of the job are ever running at once; with job.Allow only the tick key is taken.
	Overlap job.Overlap
	// MaxAttempts bounds the runs of one tick across the cluster: every replica's attempts
	// count ({prefix:job}:attempts:<unix ms>, taken with the tick's lock), and
	// job.Run.Attempt is the tick's attempt number across the cluster. An attempt beyond it
	// is not run: the tick is kept as done, and Lock fails with ErrNoAttemptsLeft (permanent:
	// Retry stops). The scheduler sets it to the job's Retries + 1. Default 0: not counted
	// (one round trip less per run), and job.Run.Attempt is left as Retry set it. Manual runs
	// are not counted.
	MaxAttempts int
	// KeepDone is how long a tick whose run succeeded is kept as done, so that replicas that
	// come late (clock skew, retries) see it done instead of running it again. Default 1 min.
	KeepDone time.Duration
	// BackOff returns a fresh schedule of waits between attempts while the nodes are
	// unavailable (ErrQuorumUnavailable). Default: 10ms doubling to 500ms, full jitter, as
	// redlock.WithBackOff.
	BackOff func() backoff.BackOff
	// Clock tells the time for the tick's deadline (job.Run.Deadline). Default SystemClock.
	// Waits between attempts are on the real clock whatever this is: they wait for nodes and
	// racing replicas, not for ticks.
	Clock Clock
	// Limiter bounds the lock requests in flight at once across the Locks of a scheduler,
	// which sets it (scheduler.WithLockConcurrency). Default nil: no bound.
	Limiter *limiter.Limiter
	// Logger receives the abnormal events, one line each at Warn: lease renewals that failed
	// (one line for a stretch of consecutive failures, with their count),
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
	o := jobseam.WithDefaults(job.Options{LockTTL: c.TTL, RenewEvery: c.RenewEvery})
	c.TTL, c.RenewEvery = o.LockTTL, o.RenewEvery
	if c.KeepDone == 0 {
		c.KeepDone = defaultKeepDone
	}
	if c.BackOff == nil {
		c.BackOff = jitter.LockRetries
	}
	if c.Clock == nil {
		c.Clock = SystemClock()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// ErrNoAttemptsLeft is returned by Lock, wrapped with backoff.Permanent, for an attempt at a
// tick beyond LockConfig.MaxAttempts across the cluster: the tick was tried that many times
// already, here or on other replicas.
var ErrNoAttemptsLeft = errors.New("middleware: the tick's attempts are used up across the cluster (Retries + 1): not run")

// errNoRun is returned by Lock when the context carries no job.Run: Lock needs the job's name
// and tick to name the lock. It is a mistake in the program, which its text says how to fix.
var errNoRun = errors.New("middleware: no job.Run in the context: run the handler from a scheduler, or add one with job.NewContext")

// Lock runs the handler only on the one replica that takes the tick's lock, under the lock's
// lease.
//
// The lock is the tick key (a manual run's own key for job.Run.Trigger), with the job's run
// key too when Overlap is Forbid. A tick held by
// another replica, already done, or (Forbid) whose previous run still runs, and every tick
// while the job's pause key is on a quorum of the nodes, is skipped with a final
// *job.SkipError; refusals that may have split the vote, and run keys that may be leftovers
// of a failed attempt or of a release that missed a node, are looked at again first (the
// latter on every node; docs/scheduler.md). Unavailable nodes are
// retried on cfg.BackOff until the tick's deadline or ctx's end.
//
// The handler runs under the lease's context (cancelled with cause redlock.ErrLeaseLost before
// the lock could expire anywhere), with a job.Run whose FencingToken is set. On error the tick
// is released for a retry (the error matches redlock.ErrLeaseLost if the lease was lost) —
// except a manual run's, which is kept as done either way, and is not stopped by a pause.
// A handler that returned nil succeeded, whatever happened to the lease afterwards: Lock
// returns nil, so the run is never tried again, and the tick is kept as done for cfg.KeepDone
// — where the lock was lost, on every node that no newer holder took (redlock's mark-done
// script, with the run's fencing token). A newer holder found there ran the tick a second time: it
// is logged at Warn as a detected duplicate, and recorded as the event
// "cronlock.duplicate.detected" on the tick's span.
// Once cfg.Stop is closed, no handler starts (see LockConfig.Stop).
// Lock records spans and metrics when ctx carries Trace's span or Metrics' instruments.
// A ctx without a job.Run (the scheduler gives one; job.NewContext adds one) is an error: Lock
// returns it without calling the handler.
func Lock(locks *redlock.Client, cfg LockConfig) Middleware {
	cfg = cfg.withDefaults()
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			run, ok := job.RunFrom(ctx)
			if !ok {
				return errNoRun
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
			if n := lockseam.Acquisitions(l); n > 0 {
				r.Attempt = int(n)
				if r.Attempt > cfg.MaxAttempts {
					return cfg.refuseAttempt(l, &r, p)
				}
			}
			// The run's context ends with job.ErrReplaced as its cause when a renewal finds the
			// lock revoked by a newer tick (Replace), before the lease ends with the loss.
			rctx, replaced := context.WithCancelCause(p.startRun(ctx, &r))
			defer replaced(nil)
			leaseOpts, renewFails := cfg.leaseOptions(p, &r, replaced)
			lease, err := l.Lease(rctx, leaseOpts...)
			if err != nil {
				p.endRun(err, false, nil, time.Time{})
				return errors.Join(err, l.Release(context.Background()))
			}
			finished := false
			defer func() {
				if !finished { // the handler panicked: release, and let the panic go on
					p.endRun(nil, true, lease.Err(), l.ValidUntil())
					cfg.release(lease, &r, false, p)
					renewFails.flush()
				}
			}()
			herr := errNotStarted
			if !stopped(cfg.Stop) { // checked last: no handler starts once Stop is closed
				herr = next(job.NewContext(lease.Context(), &r))
			}
			finished = true
			err = cfg.finish(lease, &r, herr, p)
			renewFails.flush()
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

// acquire takes the tick's lock, reporting each attempt to p: one attempt after another,
// each failure decided by the claim (see claim.decide), until one succeeds or a decision ends
// the acquisition.
func (c LockConfig) acquire(ctx context.Context, locks *redlock.Client, run *job.Run, p *lockProbe) (*redlock.Lock, error) {
	cl := c.newClaim(locks, run, p)
	// Made here with room for every option (see options and try), and kept out of the claim,
	// the options stay on the stack.
	opts := cl.options(make([]redlock.AcquireOption, 0, 10))
	for {
		now := c.Clock.Now()
		if err := cl.late(now); err != nil {
			return nil, err
		}
		l, err := cl.try(ctx, now, opts)
		if err == nil {
			return l, nil
		}
		switch next, err := cl.decide(ctx, err); next {
		case stop:
			return nil, err
		case backOff:
			if err := cl.wait(ctx, err); err != nil {
				return nil, err
			}
		}
	}
}

// claim is one acquisition of a tick's lock by Lock: the tick's keys, and what the failed
// attempts so far left to decide the next one.
type claim struct {
	c       LockConfig
	locks   *redlock.Client
	run     *job.Run
	p       *lockProbe
	tickKey string // the tick's key (TriggerKey for a manual run)
	runKey  string

	b           backoff.BackOff   // the waits between attempts, made at the first wait
	unavailable error             // the last ErrQuorumUnavailable
	rechecks    int               // the attempts made again after the run key was found held
	settle      time.Duration     // added to the next wait
	last        *lockseam.Attempt // the last attempt redlock made
	revoked     *redlock.Holder   // the run this tick asked to stop (Replace)
	// failed are the errors of the last failed acquisitions (up to maxOwnFailures), whose
	// attempts' leftovers may refuse the next ones (see ownLeftover).
	failed []error
}

// maxOwnFailures is how many of a claim's failed acquisitions it remembers as its own.
const maxOwnFailures = 4

// decision is what a claim does after an attempt failed.
type decision int

const (
	stop    decision = iota // give up, with the decision's error
	again                   // attempt again at once (late decides first)
	backOff                 // wait on the backoff, then attempt again
)

// newClaim prepares the acquisition of run's tick.
func (c LockConfig) newClaim(locks *redlock.Client, run *job.Run, p *lockProbe) claim {
	cl := claim{c: c, locks: locks, run: run, p: p, last: new(lockseam.Attempt),
		tickKey: layout.TickKey(c.Prefix, run.Job, run.Tick), runKey: layout.RunKey(c.Prefix, run.Job)}
	if run.Trigger != "" {
		cl.tickKey = layout.TriggerKey(c.Prefix, run.Job, run.Trigger) // an operator's run: a pause does not stop it
	}
	if p != nil {
		p.tickKey = cl.tickKey
	}
	return cl
}

// options appends the options of every attempt of the claim to opts.
func (cl *claim) options(opts []redlock.AcquireOption) []redlock.AcquireOption {
	c, run := cl.c, cl.run
	// No FenceKey: redlock's default counter for keys tagged {prefix:name} is {prefix:name}:fence,
	// one per job, shared by its ticks and manual runs, so tokens increase from run to run.
	opts = append(opts, seamOption(lockseam.ResolveSplits(maxSplitRetries)))
	if run.Trigger == "" {
		opts = append(opts, seamOption(lockseam.RefuseWhile(layout.PauseKey(c.Prefix, run.Job))))
	}
	if run.Replica != "" {
		opts = append(opts, redlock.Label(run.Replica))
	}
	// The tick span's context, for the replicas that will be refused to link to; and for a
	// Replace job the tick, for the ticks that will find this run under way.
	md := cl.p.metadata()
	if c.Overlap == job.Replace {
		md += tickMark + strconv.FormatInt(run.Tick.UnixMilli(), 10)
	}
	if md != "" {
		opts = append(opts, redlock.Metadata(md))
	}
	if c.Overlap != job.Allow {
		opts = append(opts, redlock.Also(cl.runKey))
	}
	if c.MaxAttempts > 0 && run.Trigger == "" {
		// The count lives as long as the tick may be tried: its window, and the done marker's
		// life after it.
		ttl := c.KeepDone + c.TTL
		if !run.Deadline.IsZero() {
			ttl += max(run.Deadline.Sub(c.Clock.Now()), 0)
		}
		opts = append(opts, seamOption(lockseam.CountAcquisitions(layout.AttemptsKey(c.Prefix, run.Job, run.Tick), ttl)))
	}
	last, p := cl.last, cl.p // not cl: the claim stays on the stack
	return append(opts, seamOption(lockseam.OnAttempt(func(a lockseam.Attempt) { *last = a; p.attempt(a) })))
}

// seamOption is the redlock.AcquireOption that package lockseam returns as any.
func seamOption(o any) redlock.AcquireOption { return o.(redlock.AcquireOption) }

// late reports, at now, a tick whose window closed: skipped as late, or failed when the nodes
// were unavailable until then.
func (cl *claim) late(now time.Time) error {
	run := cl.run
	if run.Deadline.IsZero() || now.Before(run.Deadline) {
		return nil
	}
	if cl.unavailable != nil {
		return fmt.Errorf("tick %s of job %q: window closed while the lock nodes were unavailable: %w", run.Tick.Format(time.RFC3339Nano), run.Job, cl.unavailable)
	}
	return &job.SkipError{Reason: job.SkipLate}
}

// try makes one attempt (redlock's, with its split votes resolved) at now, within a slot of
// the limiter, with opts (every attempt's) and this attempt's own options.
func (cl *claim) try(ctx context.Context, now time.Time, opts []redlock.AcquireOption) (*redlock.Lock, error) {
	c, run := cl.c, cl.run
	if err := c.Limiter.Wait(ctx); err != nil {
		return nil, err
	}
	defer c.Limiter.Done()
	if cl.rechecks > 0 {
		// The run key may be left on the lock's primary node, whose refusal alone ends a
		// contended attempt: ask every node.
		opts = append(opts, seamOption(lockseam.AskEveryNode()))
	}
	if !run.Deadline.IsZero() {
		// No attempt, first or after a split vote, starts after the tick's window; the
		// window is on c.Clock, redlock counts in real time.
		opts = append(opts, seamOption(lockseam.StartBefore(time.Now().Add(run.Deadline.Sub(now)))))
	}
	cl.p.beginAttempt()
	l, err := cl.locks.TryAcquire(ctx, cl.tickKey, c.TTL, opts...)
	cl.p.endAttempt(err) // if the attempt was refused before it was made
	return l, err
}

// decide decides what follows the failed attempt err: a refusal is looked at by refused; nodes
// unavailable are waited for; a window that closed just before the attempt is found late at
// once; anything else ends the claim.
func (cl *claim) decide(ctx context.Context, err error) (decision, error) {
	defer cl.remember(err)
	if ae, ok := errors.AsType[*redlock.AcquireError](err); ok && errors.Is(err, redlock.ErrNotAcquired) {
		return cl.refused(ctx, ae, err)
	}
	switch {
	case ctx.Err() != nil:
		return stop, err
	case errors.Is(err, redlock.ErrQuorumUnavailable):
		cl.unavailable = err
		return backOff, err
	case errors.Is(err, context.DeadlineExceeded):
		return again, err // the window closed just before the attempt: skipped as late
	}
	return stop, err
}

// refused decides what follows a refusal: replace the older run under way (Replace), skip the
// tick, or look at the run key again.
//
// A run key found held may be the leftover of another tick's failed attempt (a replica whose
// clock is behind, refused that tick as done on the other nodes), or of a release that missed
// a node: it is looked at again, on every node, once it had time to be released. A key held
// by a leftover of the claim's own failed attempts is neither held nor an overlap: the claim
// waits for its release (see ownLeftover).
func (cl *claim) refused(ctx context.Context, ae *redlock.AcquireError, err error) (decision, error) {
	se := skip(ae, cl.runKey, err)
	h := skipHolder(ae)
	done := h != nil && h.Done // done, or skipped and marked
	switch {
	case !done && cl.ownLeftover(ae, err):
		cl.c.Logger.Debug("cronlock: refused by the leftover of an own failed attempt", "job", cl.run.Job, "tick", cl.run.Tick,
			"replica", cl.run.Replica, "ok", ae.OK, "refused", ae.Refused)
	case cl.replacesHolder(ctx, se, ae, done):
		cl.askToStop(ctx, ae.Holder)
	case cl.skips(ctx, se, done):
		if !done && se.Reason == job.SkipOverlap && cl.run.Trigger == "" && !cl.run.Backfill { // a manual run or backfill waits instead
			cl.c.markSkipped(ctx, cl.locks, cl.run, cl.tickKey)
		}
		return stop, se
	default:
		cl.rechecks++
		cl.c.Logger.Debug("cronlock: looking at the run key again", "job", cl.run.Job, "tick", cl.run.Tick, "replica", cl.run.Replica,
			"ok", ae.OK, "refused", ae.Refused, "holder", h)
	}
	// Let the failed attempt be released before the next one, or it could be refused by its
	// own leftover: the release was sent when the attempt failed, takes about as long as an
	// attempt, and is over within the node timeout.
	cl.settle = min(2*cl.last.Elapsed+time.Millisecond, lockseam.NodeTimeout(cl.locks, cl.c.TTL))
	return backOff, err
}

// ownLeftover reports whether the refusal ae (of the acquisition that failed with err) is by
// a leftover of one of the claim's own failed attempts, whose release had not reached the node
// yet — not by another holder. Under load such a release can take longer than the settling
// wait of an acquisition's split votes, and the tick would be skipped as held by no one.
func (cl *claim) ownLeftover(ae *redlock.AcquireError, err error) bool {
	if ae.Holder == nil {
		return false
	}
	if lockseam.LeftBy(*ae.Holder, err) {
		return true
	}
	for _, f := range cl.failed {
		if lockseam.LeftBy(*ae.Holder, f) {
			return true
		}
	}
	return false
}

// remember records the failed acquisition err for ownLeftover.
func (cl *claim) remember(err error) {
	if len(cl.failed) == maxOwnFailures {
		cl.failed = append(cl.failed[:0], cl.failed[1:]...)
	}
	cl.failed = append(cl.failed, err)
}

// replacesHolder reports whether the refusal se is by a run under way that this tick replaces
// (Overlap Replace): a run of an older tick, not done.
func (cl *claim) replacesHolder(ctx context.Context, se *job.SkipError, ae *redlock.AcquireError, done bool) bool {
	return cl.c.replaces(cl.run) && se.Reason == job.SkipOverlap && !done && ae.Holder != nil &&
		olderRun(*ae.Holder, cl.run) && ctx.Err() == nil
}

// skips reports whether the refusal se is final: the tick is done or held, or the run key was
// looked at again enough times, or ctx ended.
func (cl *claim) skips(ctx context.Context, se *job.SkipError, done bool) bool {
	return done || se.Reason != job.SkipOverlap || cl.rechecks == maxOverlapRechecks || ctx.Err() != nil
}

// askToStop asks the run under way, h, to stop, once per run found, and has the next attempts
// wait for its release within the window, asking every node (the run key may be a leftover on
// the primary).
func (cl *claim) askToStop(ctx context.Context, h *redlock.Holder) {
	if cl.revoked == nil || !lockseam.SameHold(*cl.revoked, *h) {
		cl.revoked = h
		cl.c.replace(ctx, cl.locks, cl.run, *h, cl.p)
	}
	cl.rechecks = 1
}

// wait waits before the next attempt after err, on the backoff and within the tick's window,
// and returns the error that ends the claim instead: the backoff's attempts are used up, or
// ctx ended.
func (cl *claim) wait(ctx context.Context, err error) error {
	if cl.b == nil {
		cl.b = cl.c.BackOff()
	}
	wait := cl.b.NextBackOff()
	if wait == backoff.Stop {
		return err
	}
	wait, cl.settle = wait+cl.settle, 0
	if !cl.run.Deadline.IsZero() {
		wait = max(min(wait, cl.run.Deadline.Sub(cl.c.Clock.Now())), 0)
	}
	// Real time, whatever the clock: this waits for racers and nodes, not for ticks.
	if !sleep(SystemClock(), wait, ctx.Done()) {
		return errors.Join(err, context.Cause(ctx))
	}
	return nil
}

// replaces reports whether run's tick replaces the run under way: a scheduled tick of an
// Overlap Replace job (manual runs and backfilled ticks wait instead).
func (c LockConfig) replaces(run *job.Run) bool {
	return c.Overlap == job.Replace && run.Trigger == "" && !run.Backfill
}

// tickMark starts the tick's instant (Unix milliseconds) in the lock metadata of a Replace
// job's run, after the trace context if any.
const tickMark = " tick="

// olderRun reports whether the run found holding the job's run key (h) is of a tick before
// run's, from its lock metadata (a run of a job that was not Replace there has no tick in it:
// it counts as older). A replica whose clock is behind must not replace the run of a newer
// tick with its own older one: it skips its tick instead.
func olderRun(h redlock.Holder, run *job.Run) bool {
	i := strings.LastIndex(h.Metadata, tickMark)
	if i < 0 {
		return true
	}
	ms, err := strconv.ParseInt(h.Metadata[i+len(tickMark):], 10, 64)
	return err != nil || ms < run.Tick.UnixMilli()
}

// lockTraceparent returns the trace context of a lock's metadata, without its tick.
func lockTraceparent(md string) string {
	tp, _, _ := strings.Cut(md, " ")
	return tp
}

// replace asks the run that holds the job's run key (h) to stop: its lock is revoked, so its
// lease ends at its next renewal, and the revocation is announced on the prefix's replace channel for its
// scheduler to stop it at once.
func (c LockConfig) replace(ctx context.Context, locks *redlock.Client, run *job.Run, h redlock.Holder, p *lockProbe) {
	marked, err := lockseam.Revoke(locks, ctx, h, layout.ReplaceChannel(c.Prefix), run.Job)
	p.replacing(h, marked, err)
	if err != nil {
		c.Logger.Warn("cronlock: could not ask the run under way to stop; this tick waits for it until its window closes",
			"job", run.Job, "tick", run.Tick, "holder", h.Label, "marked", marked, "err", err)
		return
	}
	c.Logger.Info("cronlock: asked the run under way to stop (overlap replace)", "job", run.Job, "tick", run.Tick,
		"holder", h.Label, "marked", marked)
}

// refuseAttempt ends an attempt at a tick beyond MaxAttempts, whose lock l was just taken:
// the tick is kept as done, so that no replica tries it again.
func (c LockConfig) refuseAttempt(l *redlock.Lock, run *job.Run, p *lockProbe) error {
	err := fmt.Errorf("tick %s of job %q: attempt %d of %d: %w", run.Tick.Format(time.RFC3339Nano), run.Job, run.Attempt, c.MaxAttempts, ErrNoAttemptsLeft)
	p.startRelease(true)
	rerr := lockseam.ReleaseKeepingDone(l, context.Background(), c.KeepDone)
	p.endRelease(rerr)
	if rerr != nil {
		c.Logger.Warn("cronlock: could not mark tick done", "job", run.Job, "tick", run.Tick, "token", run.FencingToken, "err", rerr)
	}
	return backoff.Permanent(err)
}

// markSkipped keeps the tick as done with layout.SkippedMarker, so that replicas whose clocks are
// behind do not run it late — a late run would hold the run key when this replica's next
// tick comes, and skip that one in turn. Best effort: if the tick is taken meanwhile, the
// taker decides.
func (c LockConfig) markSkipped(ctx context.Context, locks *redlock.Client, run *job.Run, tickKey string) {
	opts := []redlock.AcquireOption{redlock.Metadata(layout.SkippedMarker)}
	if run.Replica != "" {
		opts = append(opts, redlock.Label(run.Replica))
	}
	if c.Limiter.Wait(ctx) != nil {
		return
	}
	defer c.Limiter.Done()
	l, err := locks.TryAcquire(ctx, tickKey, c.TTL, opts...)
	if err != nil {
		return
	}
	if err := lockseam.ReleaseKeepingDone(l, context.Background(), c.KeepDone); err != nil {
		c.Logger.Warn("cronlock: could not mark a skipped tick", "job", run.Job, "tick", run.Tick, "err", err)
	}
}

// skip turns a refusal into a *job.SkipError with its reason and the holder's label.
func skip(ae *redlock.AcquireError, runKey string, err error) *job.SkipError {
	se := &job.SkipError{Reason: job.SkipHeld, Err: err}
	if pause, ok := lockseam.Refusal(ae); ok {
		p := layout.ParsePause(pause)
		se.Reason, se.Pause = job.SkipPaused, &p
		return se
	}
	if h := ae.Holder; h != nil {
		se.Holder = h.Label
		switch {
		case h.Done && h.Metadata == layout.SkippedMarker:
			se.Reason = job.SkipOverlap
		case h.Done:
			se.Reason = job.SkipDone
		case h.Key == runKey:
			se.Reason = job.SkipOverlap
		}
	}
	return se
}

// skipHolder returns the holder of the tick (or of the previous run) that the refusal ae
// reports to its skip, or nil: a refusal because the job is paused reports none.
func skipHolder(ae *redlock.AcquireError) *redlock.Holder {
	if _, paused := lockseam.Refusal(ae); paused {
		return nil
	}
	return ae.Holder
}

// leaseOptions returns the options of a run's lease: the renewal interval, and a hook that
// ends the run's context through replaced when a renewal finds the lock revoked (a newer tick
// of a Replace job asked the run to stop), and otherwise reports each renewal to p and counts
// the failed ones in the returned renewalFailures, which logs them.
func (c LockConfig) leaseOptions(p *lockProbe, run *job.Run, replaced context.CancelCauseFunc) ([]redlock.LeaseOption, *renewalFailures) {
	rf := &renewalFailures{logger: c.Logger, run: run}
	onRenew := lockseam.OnRenew(func(rn lockseam.Renewal) {
		if errors.Is(rn.Err, lockseam.ErrRevoked) {
			replaced(fmt.Errorf("%w: %w", job.ErrReplaced, rn.Err))
			return
		}
		p.renewal(rn)
		rf.add(rn)
	})
	return []redlock.LeaseOption{redlock.RenewEvery(c.RenewEvery), onRenew.(redlock.LeaseOption)}, rf
}

// renewalFailures logs a run's failed lease renewals: one line for each stretch of consecutive
// failures, with their count, when it ends — at the next successful renewal, or when the lease
// has ended (flush). Its add runs in the lease's goroutine, and flush after Lease.Close waited
// for it.
type renewalFailures struct {
	logger *slog.Logger
	run    *job.Run
	count  int   // failures in the current stretch
	first  int   // renewal number of its first failure
	err    error // its last failure's error
}

func (f *renewalFailures) add(rn lockseam.Renewal) {
	if rn.Err == nil {
		f.log(true)
		return
	}
	if f.count == 0 {
		f.first = rn.Number
	}
	f.count++
	f.err = rn.Err
}

// flush logs the failures of a stretch that lasted until the lease ended.
func (f *renewalFailures) flush() {
	if f != nil {
		f.log(false)
	}
}

func (f *renewalFailures) log(recovered bool) {
	if f.count == 0 {
		return
	}
	f.logger.Warn("cronlock: lease renewals failed", "job", f.run.Job, "tick", f.run.Tick, "token", f.run.FencingToken,
		"failures", f.count, "first_renewal", f.first, "recovered", recovered, "err", f.err)
	f.count = 0
}

// finish closes the lease after the handler returned herr, and returns the run's error.
//
// A run that succeeded is done, whatever happened to the lease after: it returns nil, and the
// tick is kept as done — by the release if the lock was still ours on a quorum, or else by
// markDone wherever no newer holder took it.
func (c LockConfig) finish(lease *redlock.Lease, run *job.Run, herr error, p *lockProbe) error {
	lost := lease.Err() // nil while the lease holds
	replaced := errors.Is(lost, job.ErrReplaced)
	leaseLost := errors.Is(lost, redlock.ErrLeaseLost) && !replaced
	p.endRun(herr, false, lost, lease.Lock().ValidUntil())
	if herr == nil {
		if err := c.release(lease, run, true, p); err != nil {
			c.markDone(lease.Lock(), run, err, p)
		} else if leaseLost {
			c.Logger.Warn("cronlock: tick ran past its lease, which was lost; it is marked done", "job", run.Job, "tick", run.Tick,
				"token", run.FencingToken, "lease", lost)
		}
		return nil
	}
	if replaced { // the tick is done, and the run not tried again: a newer tick replaces it
		c.release(lease, run, true, p)
		if !errors.Is(herr, job.ErrReplaced) {
			herr = fmt.Errorf("%w (%w)", herr, lost)
		}
		return backoff.Permanent(herr)
	}
	c.release(lease, run, run.Trigger != "", p) // a manual run is done even if it failed
	if leaseLost && !errors.Is(herr, redlock.ErrLeaseLost) {
		return fmt.Errorf("%w (%w)", herr, lost)
	}
	return herr
}

// markDone marks the tick of a run that succeeded done on the nodes where no newer holder
// took it, after its release (rerr) could not keep it done on a quorum, and reports each
// newer holder as a duplicate run.
//
// While nodes do not answer (the replica lost them, or they are slow) and no newer holder
// showed, it tries again, for up to the lock's TTL: a tick left undone when its lock expires
// could be run again by a replica still within the tick's window.
func (c LockConfig) markDone(l *redlock.Lock, run *job.Run, rerr error, p *lockProbe) {
	until, tries := time.Now().Add(c.TTL), 1
	marked, newer, err := lockseam.MarkDone(l, context.Background(), c.KeepDone)
	for ; err != nil && errors.Is(err, redlock.ErrQuorumUnavailable) && len(newer.([]redlock.Holder)) == 0 && time.Now().Before(until); tries++ {
		time.Sleep(min(c.TTL/20, 250*time.Millisecond))
		marked, newer, err = lockseam.MarkDone(l, context.Background(), c.KeepDone)
	}
	for _, h := range newer.([]redlock.Holder) {
		c.Logger.Warn("cronlock: duplicate run detected: another holder took the tick while this run was going on",
			"job", run.Job, "tick", run.Tick, "token", run.FencingToken, "holder", h.Label, "holder_token", h.Token, "holder_done", h.Done)
		p.duplicate(h)
	}
	if err != nil {
		c.Logger.Warn("cronlock: tick ran, but could not be marked done on a quorum; its lock expires after its TTL",
			"job", run.Job, "tick", run.Tick, "token", run.FencingToken, "marked", marked, "tries", tries, "err", errors.Join(rerr, err))
		return
	}
	c.Logger.Warn("cronlock: tick ran past its lock, which was lost; it is marked done where no other holder took it",
		"job", run.Job, "tick", run.Tick, "token", run.FencingToken, "marked", marked, "tries", tries, "release", rerr)
}

// release closes the lease, keeping the tick as done or not, and logs a release that failed
// (finish reports the marking of a done tick).
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
		err = lockseam.CloseKeepingDone(lease, ctx, c.KeepDone)
	} else {
		err = lease.Close(ctx)
	}
	p.endRelease(err)
	if err != nil && (!done || run.Trigger != "") {
		msg := "cronlock: could not release tick; its lock expires after its TTL"
		if done {
			msg = "cronlock: could not mark tick done; its lock expires after its TTL"
		}
		c.Logger.Warn(msg, "job", run.Job, "tick", run.Tick, "token", run.FencingToken, "err", err)
	}
	return err
}
