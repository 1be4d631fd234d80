// Package schedseam gives cronlock's own packages the parts of package scheduler that they
// need and a user of scheduler does not: checking an operator's name before asking anything
// (the CLI and the web console), resolving a spec's H forms (the config checks), the daemon's
// gauges and configuration hash, the periods of the background work of a running scheduler
// (the daemon's --heartbeat and --rescue-every flags, and tests), the version its heartbeats
// report (the daemon's release), whether Stop left runs under way (the daemon's shutdown), and
// the context that Stop ends, which each run's context carries (the Lock and Retry
// middleware). Keeping them here keeps scheduler's exported API to what users call.
//
// CheckOperator, WithStopping and Stopping are defined here: package scheduler checks the
// names of WithOperator with the first, and package middleware, which a program may use
// without a scheduler, reads the context that WithStopping stores. Package scheduler sets the
// variables in an init function, with its unexported functions; a program that uses them
// imports scheduler. This package cannot import scheduler (scheduler imports it), so a
// scheduler and an option travel as any: each function takes the *scheduler.Scheduler its doc
// names, and panics on another type — a bug in cronlock, never input.
package schedseam

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// maxOperatorLen is the most characters an operator's name may have (CheckOperator).
const maxOperatorLen = 64

// CheckOperator returns an error unless name can name an operator (scheduler.WithOperator):
// 1 to 64 printable characters (spaces allowed), not only spaces. The error says which rule
// it broke and how to fix it.
func CheckOperator(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("scheduler: operator name %q is empty: give who asks, e.g. %q", name, "alice")
	case !utf8.ValidString(name):
		return fmt.Errorf("scheduler: operator name %q is not UTF-8: give a name in plain text", name)
	case n > maxOperatorLen:
		return fmt.Errorf("scheduler: operator name %q is %d characters long: use at most %d", name, n, maxOperatorLen)
	}
	for _, r := range name {
		if r != ' ' && !unicode.IsPrint(r) {
			return fmt.Errorf("scheduler: operator name %q contains %q: use letters, digits, punctuation and spaces only", name, r)
		}
	}
	return nil
}

// ResolveSpec returns spec with every H of its cron fields replaced by concrete values hashed
// from the job's name, as the scheduler does for a job's spec before parsing it (the forms
// are in docs/scheduler.md, "Jitter and H"). Specs without H, descriptors and "@every d" are
// returned as they are; a malformed H is an error that quotes the spec and names the field, as
// scheduler.ParseSpec's errors do.
var ResolveSpec func(spec, name string) (string, error)

// CheckJob checks j as scheduler.Scheduler.Add does for a scheduler in UTC (the default
// location) whose lock client is locks, now, without a scheduler: Job.Validate, its spec
// resolved, parsed and firing, its lock TTL accepted by locks, and its jitter shorter than the
// time between its ticks. Its error is Add's, a *job.InvalidError naming the field. It leaves
// out what needs a scheduler: a name registered already.
var CheckJob func(locks *redlock.Client, j job.Job) error

// RegisterGauges adds the per-job and replica instruments of the *scheduler.Scheduler s to
// mp, read at each collection (docs/observability.md lists them). Unregister the returned
// registration to stop.
var RegisterGauges func(s any, mp metric.MeterProvider) (metric.Registration, error)

// SetConfigHash sets the hash of the configuration of the *scheduler.Scheduler s that its
// heartbeats report (scheduler.Replica.ConfigHash), and sends a heartbeat at once if it is
// running. With "": a hash of its registered jobs' names, specs and options, the default.
var SetConfigHash func(s any, hash string)

// WithTriggerPoll returns the scheduler.Option that sets how often a running scheduler reads
// the queue of manual runs from the nodes, besides the nodes' announcements. Default 1s
// (scheddefault.TriggerPoll); NewControl refuses it.
var WithTriggerPoll func(d time.Duration) any

// WithRescueEvery returns the scheduler.Option that sets how often a running scheduler looks
// for runs of its jobs whose replica vanished, to record them interrupted. Default 10s
// (scheddefault.RescueEvery); d must be positive, and NewControl refuses it.
var WithRescueEvery func(d time.Duration) any

// WithHeartbeat returns the scheduler.Option that sets how often a running scheduler writes
// its heartbeat to the lock nodes (scheduler.Control.Replicas). Default 10s
// (scheddefault.Heartbeat); d must be positive, and NewControl refuses it.
var WithHeartbeat func(d time.Duration) any

// WithVersion returns the scheduler.Option that sets the version a scheduler's heartbeats
// report (scheduler.Replica.Version). Default: the main module's version from the Go build
// information; NewControl refuses it.
var WithVersion func(v string) any

// RunsLeft reports whether err, returned by (*scheduler.Scheduler).Stop, says that Stop's
// context ended while runs were still under way, and that it returned without them: their
// handlers may still run, and their locks are still held. Closing the lock client then would
// release the locks of runs that may still be working; a later Stop waits for them.
var RunsLeft func(err error) bool

// stoppingKey is the context key of WithStopping.
type stoppingKey struct{}

// WithStopping returns ctx carrying stopping, the context that a scheduler's Stop ends, whose
// Done channel the scheduler gives its jobs' Lock and Retry middleware as their Stop. Every
// run's context derives from it, so the middleware can wait for Stop with context.AfterFunc
// on stopping, at no goroutine per run.
func WithStopping(ctx, stopping context.Context) context.Context {
	return context.WithValue(ctx, stoppingKey{}, stopping)
}

// Stopping returns the context that ctx carries (WithStopping) and whether its Done channel is
// stop.
func Stopping(ctx context.Context, stop <-chan struct{}) (context.Context, bool) {
	stopping, ok := ctx.Value(stoppingKey{}).(context.Context)
	return stopping, ok && stopping.Done() == stop
}
