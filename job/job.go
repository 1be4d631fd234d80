package job

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/cenkalti/backoff/v4"
)

// Handler is the work of a job: it runs once per tick on the one replica that holds the
// tick, and must return when ctx is done (ctx ends when the run's lease is lost, when a
// timeout passes, or when the scheduler stops). A nil error means the tick is done and never
// runs again; an error lets the tick be retried under the job's retry policy.
type Handler func(ctx context.Context) error

// Overlap says whether runs of one job may overlap in time, anywhere in the cluster.
type Overlap int

const (
	// Forbid (the default): no two runs of a job at once, cluster-wide. A tick that comes
	// while a previous run is still running is skipped (skipped_overlap).
	Forbid Overlap = iota
	// Allow: runs of different ticks may overlap; each tick still runs once.
	Allow
	// Replace: no two runs of a job at once, cluster-wide, as with Forbid; but a tick that
	// comes while a previous run is still running asks that run to stop — its context is
	// cancelled with a cause matching ErrReplaced, on whichever replica it runs — and starts
	// once the old run has released its locks, if that happens within the tick's window. The
	// old run's outcome is "replaced", and its tick is done: it is not retried. Manual runs and
	// backfilled ticks replace nothing: they wait, as with Forbid.
	Replace
)

func (o Overlap) String() string {
	switch o {
	case Forbid:
		return "forbid"
	case Allow:
		return "allow"
	case Replace:
		return "replace"
	}
	return fmt.Sprintf("Overlap(%d)", int(o))
}

// defaultLockTTL is the default Options.LockTTL (Redisson's watchdog value).
const defaultLockTTL = 30 * time.Second

// Options tune how a job runs. The zero value of each field means its default.
type Options struct {
	// Timeout bounds one attempt of a run: its context is cancelled, with cause
	// middleware.ErrTimeout, when it has run this long. Default 0: no bound other than the
	// lease.
	Timeout time.Duration
	// LockTTL is the TTL of the tick's lock. The lock is renewed while the job runs, so the
	// TTL is not a bound on the run: it is how long other replicas wait before taking a tick
	// over from a replica that died or was cut off. Default 30s. It must be at most the lock
	// client's max TTL (redlock.WithMaxTTL, default 1 minute).
	LockTTL time.Duration
	// RenewEvery is how often the lock is renewed while the job runs. Default LockTTL/3. It
	// must be at most LockTTL/2, so that one failed renewal can be tried again before the lock
	// runs out.
	RenewEvery time.Duration
	// Overlap says whether runs of this job may overlap. Default Forbid.
	Overlap Overlap
	// Retries is how many times a failed run of a tick is tried again, across the cluster:
	// the tick runs at most Retries + 1 times in all, whichever replicas try it (each retries
	// its own failures, and another one may take the tick once it is released; the attempts
	// are counted on the lock nodes, with the tick's lock). Retries happen while the tick's
	// window is open: until the next tick, and at most the scheduler's tick retention minus
	// twice its max clock skew after the tick. A run that lost its lease counts as an
	// attempt. Skips, errors wrapped with backoff.Permanent and runs cancelled by the
	// scheduler are not retried. Default 0: no retries.
	Retries int
	// RetryBackOff returns a fresh schedule of waits between retries; it is called once per
	// tick. Default: 1s doubling to 1 min, full jitter (middleware.RetryPolicy).
	RetryBackOff func() backoff.BackOff
	// CatchUp is how old a missed tick may be and still run when the scheduler starts: with
	// CatchUp > 0, the newest tick in [start − CatchUp, start) runs once at start unless a
	// replica already ran it. Default 0: missed ticks are skipped.
	CatchUp time.Duration
	// Jitter delays the start of each tick by an amount in [0, Jitter), to spread jobs that
	// share a spec (and the load they put on what they call) over Jitter. The delay is a
	// hash of the job's name and the tick, not a random draw: every replica computes the same
	// one, so the replicas still race for the tick together, and the tick itself does not
	// move (Run.Tick, its lock and its done marker are the scheduled instant's; Run.PlannedStart
	// is the delayed start). A delay is bounded by the tick's window (see Run.Deadline): the
	// scheduler refuses a job whose Jitter is not shorter than the time between its ticks, and
	// keeps its ticks as done long enough for the window to be a second longer than Jitter.
	// Manual runs, caught-up ticks and backfilled ticks are not delayed. Default 0: every tick
	// starts at its instant.
	Jitter time.Duration
}

// withDefaults returns o with each zero field set to its default. cronlock's own packages
// call it as jobseam.WithDefaults (a go:linkname to this function: keep its name and
// signature).
func withDefaults(o Options) Options {
	if o.LockTTL == 0 {
		o.LockTTL = defaultLockTTL
	}
	if o.RenewEvery == 0 {
		o.RenewEvery = o.LockTTL / 3
	}
	return o
}

// Job is a named, scheduled Handler with its options.
type Job struct {
	// Name identifies the job across the cluster: every replica must register it under the
	// same name, and the name is part of its lock keys. Letters, digits and punctuation other
	// than braces; no spaces; at most 200 bytes.
	Name string
	// Spec is when the job runs: a cron spec with an optional seconds field
	// ("*/5 * * * *", "0 30 9 * * 1-5"), a descriptor ("@hourly", "@daily"), "@every d"
	// (aligned to the Unix epoch), each optionally prefixed by "CRON_TZ=Zone ". Package
	// scheduler parses it.
	Spec string
	// Handler is the work.
	Handler Handler
	Options
}

// maxNameLen bounds job names: they are part of every lock key.
const maxNameLen = 200

// ErrInvalid is matched (errors.Is) by every error of Validate, and by the scheduler's errors
// about a job it refuses.
var ErrInvalid = errors.New("job: invalid")

// InvalidError says which field of a job is wrong and how to fix it. It matches ErrInvalid.
type InvalidError struct {
	// Job is the job's name (may be empty when the name is what is wrong).
	Job string
	// Field is the name of the wrong field, e.g. "Spec" or "Options.RenewEvery".
	Field string
	// Problem says what is wrong and how to fix it.
	Problem string
	// Err is the underlying error, if any (e.g. the spec parser's).
	Err error
}

func (e *InvalidError) Error() string {
	var b strings.Builder
	name := fmt.Sprintf("%q", e.Job)
	if len(e.Job) > 64 { // a name too long is echoed cut
		name = fmt.Sprintf("%q… (%d bytes)", e.Job[:64], len(e.Job))
	}
	fmt.Fprintf(&b, "job %s: %s: %s", name, e.Field, e.Problem)
	return b.String()
}

// Unwrap returns ErrInvalid and the underlying error, if any: errors.Is matches both.
func (e *InvalidError) Unwrap() []error { return withSentinel(ErrInvalid, e.Err) }

// Validate reports the first thing wrong with j, as an *InvalidError naming the field and the
// fix, or nil. It checks the name, the handler and the options, with defaults applied; it does
// not parse the spec (the scheduler does) beyond refusing an empty one.
func (j Job) Validate() error {
	bad := func(field, format string, args ...any) error {
		return &InvalidError{Job: j.Name, Field: field, Problem: fmt.Sprintf(format, args...)}
	}
	if err := validateName(j.Name); err != nil {
		return err
	}
	if strings.TrimSpace(j.Spec) == "" {
		return bad("Spec", `is empty: give a cron spec, e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays) or "@every 10s"`)
	}
	if j.Handler == nil {
		return bad("Handler", "is nil: give the func(ctx context.Context) error to run at each tick")
	}
	o := withDefaults(j.Options)
	switch {
	case o.Timeout < 0:
		return bad("Options.Timeout", "%v is negative: give a positive bound, or 0 for none", o.Timeout)
	case o.LockTTL < 0:
		return bad("Options.LockTTL", "%v is negative: give a positive TTL, or 0 for the default %v", o.LockTTL, defaultLockTTL)
	case o.RenewEvery < 0:
		return bad("Options.RenewEvery", "%v is negative: give a positive interval, or 0 for LockTTL/3 (%v)", o.RenewEvery, o.LockTTL/3)
	case o.RenewEvery >= o.LockTTL:
		return bad("Options.RenewEvery", "%v is not shorter than LockTTL %v: the lock would expire before it is renewed; use LockTTL/3 (%v), or leave it 0", o.RenewEvery, o.LockTTL, o.LockTTL/3)
	case o.RenewEvery > o.LockTTL/2:
		return bad("Options.RenewEvery", "%v is more than half of LockTTL %v: one slow or failed renewal would lose the lock; use LockTTL/3 (%v), or leave it 0", o.RenewEvery, o.LockTTL, o.LockTTL/3)
	case o.Overlap < Forbid || o.Overlap > Replace:
		return bad("Options.Overlap", "%v is unknown: use job.Forbid (the default), job.Allow or job.Replace", o.Overlap)
	case o.Retries < 0:
		return bad("Options.Retries", "%d is negative: give the number of retries after a failed run, or 0 for none", o.Retries)
	case o.CatchUp < 0:
		return bad("Options.CatchUp", "%v is negative: give how old a missed tick may be and still run, or 0 to skip missed ticks", o.CatchUp)
	case o.Jitter < 0:
		return bad("Options.Jitter", "%v is negative: give the span over which to spread the starts of the ticks, or 0 to start each tick at its instant", o.Jitter)
	}
	return nil
}

// validateName reports whether name can name a job, as an *InvalidError or nil.
func validateName(name string) error {
	bad := func(format string, args ...any) error {
		return &InvalidError{Job: name, Field: "Name", Problem: fmt.Sprintf(format, args...)}
	}
	if name == "" {
		return bad(`is empty: give the job a name that is the same on every replica, e.g. "daily-report"`)
	}
	if len(name) > maxNameLen {
		return bad("is %d bytes long: use at most %d", len(name), maxNameLen)
	}
	for _, r := range name {
		switch {
		case r == '{' || r == '}':
			return bad("contains %q: braces would break the hash tag of the job's lock keys; use other punctuation, e.g. \"-\" or \":\"", r)
		case unicode.IsSpace(r) || !unicode.IsPrint(r):
			return bad("contains %q: use letters, digits and punctuation, without spaces", r)
		}
	}
	return nil
}
