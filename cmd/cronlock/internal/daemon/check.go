package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// plan is what prepare makes of the config, for start to build the daemon on.
type plan struct {
	addr  string                // the HTTP server's address ("" for none)
	spans sdktrace.SpanExporter // the spans' exporter (nil: tracing off); the caller shuts it down
	defs  []*definition         // each job's definition, in the config's order, checked
}

// prepare is the part of start that makes every check of the config against the command line
// and this host, and that validate runs alone: the HTTP server's token, the node clients (the
// nodes' passwords) and the lock client (its options: nodes, quorum, max_ttl, …), the tracing
// settings (the span exporter), and every job, built and checked as the scheduler's Add
// checks it (checkJob). What it makes connects to nothing and starts nothing; no scheduler,
// meter provider or HTTP server is made. It sets d.replica, d.clients and d.locks, which
// d.close frees, also on error. Errors of the config are usageErrors.
func (d *daemon) prepare() (plan, error) {
	cfg, f := d.cfg, d.flags
	var p plan
	d.replica = cfg.Replica
	if f.Set["replica"] {
		d.replica = f.Replica
	}
	if d.replica == "" {
		d.replica = nodes.DefaultReplica()
	}
	p.addr = cfg.HTTP
	if f.Set["http"] {
		p.addr = config.ListenAddr(f.HTTP)
		if f.HTTP == "off" {
			p.addr = ""
		}
	}
	if p.addr != "" { // the token's variable is checked as the nodes' passwords are
		if _, err := cfg.HTTPToken(nil); err != nil {
			return p, usageError{Err: err}
		}
	}
	var err error
	if d.clients, err = nodes.Clients(cfg); err != nil {
		return p, err
	}
	if d.locks, err = nodes.LockClient(cfg, d.clients, d.replica); err != nil {
		return p, usageError{Err: fmt.Errorf("%s: nodes: %w", cfg.File, err)}
	}
	if p.spans, err = newSpanExporter(cfg); err != nil {
		return p, usageError{Err: err}
	}
	if p.defs, err = d.buildJobs(cfg); err != nil {
		if p.spans != nil {
			_ = p.spans.Shutdown(context.Background())
		}
		return plan{}, usageError{Err: err}
	}
	return p, nil
}

// parseSchedule resolves the H of a job's spec from its name and parses the result, as the
// scheduler does (in UTC, its default location): the spec resolved (spec itself when it has
// no H, or when resolving fails) and its schedule.
func parseSchedule(name, spec string) (string, cron.Schedule, error) {
	resolved, err := schedseam.ResolveSpec(spec, name)
	if err != nil {
		return spec, nil, err
	}
	sched, err := scheduler.ParseSpec(resolved, time.UTC)
	return resolved, sched, err
}

// checkJob checks j, a job of the config that buildJob built, as the scheduler's Add checks it,
// without a scheduler (schedseam.CheckJob): job.Job.Validate; its spec, resolved and parsed;
// its lock TTL, which the lock client must accept (above its drift allowance and node timeout,
// up to max_ttl); and its jitter, which must be shorter than the time between its ticks. Its
// errors are Add's, for config.JobError to name the key. A name given twice is refused by
// config.Load, with the line of the key.
func checkJob(locks *redlock.Client, j job.Job) error { return schedseam.CheckJob(locks, j) }
