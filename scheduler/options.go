package scheduler

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"
	"unicode"

	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/middleware"
)

// Option configures a Scheduler. Each option documents its default.
type Option func(*config) error

type config struct {
	clock        middleware.Clock
	prefix       string
	replica      string
	logger       *slog.Logger
	middleware   []middleware.Middleware
	loc          *time.Location
	maxSkew      time.Duration
	retention    time.Duration
	retentionSet bool
	lockConc     int
	historySize  int
	triggerPoll  time.Duration
	rescueEvery  time.Duration
	heartbeat    time.Duration
	version      string
}

func defaultConfig() config {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	return config{
		clock:    middleware.SystemClock(),
		prefix:   middleware.DefaultPrefix,
		replica:  fmt.Sprintf("%s-%d", host, os.Getpid()),
		logger:   slog.Default(),
		loc:      time.UTC,
		maxSkew:  scheddefault.MaxClockSkew,
		lockConc: 10 * runtime.GOMAXPROCS(0),

		historySize: scheddefault.HistorySize,
		triggerPoll: scheddefault.TriggerPoll,
		rescueEvery: scheddefault.RescueEvery,
		heartbeat:   scheddefault.Heartbeat,
		version:     mainVersion(),
	}
}

// mainVersion is the version of the program's main module, as the Go build recorded it
// ("(devel)" for a local build); "" without build information.
func mainVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		return bi.Main.Version
	}
	return ""
}

// WithClock sets the clock that ticks are computed and fired by, which the scheduler passes on
// to its jobs' Lock and Retry middleware. Default: the system clock. Tests can give a fake
// clock that fires ticks on demand. Every replica must read (about) the same time: see
// WithMaxClockSkew.
func WithClock(c middleware.Clock) Option {
	return func(cfg *config) error {
		if c == nil {
			return errors.New("scheduler: WithClock(nil): give a clock, or leave the option out for the system clock")
		}
		cfg.clock = c
		return nil
	}
}

// WithPrefix sets the prefix of every lock key ({prefix:job}:tick:…). Default "cronlock".
// Schedulers that share lock nodes and job names but must not share ticks (two environments
// on one set of nodes) need different prefixes; the replicas of one deployment need the same.
func WithPrefix(p string) Option {
	return func(cfg *config) error {
		if p == "" || strings.ContainsAny(p, "{}") || strings.IndexFunc(p, unicode.IsSpace) >= 0 {
			return fmt.Errorf("scheduler: prefix %q: give a non-empty prefix without braces or spaces, e.g. %q", p, "cronlock")
		}
		cfg.prefix = p
		return nil
	}
}

// WithReplica sets the name of this replica, stored beside its locks (other replicas see it
// as the holder of a tick) and put in job.Run.Replica. Default "hostname-pid".
func WithReplica(name string) Option {
	return func(cfg *config) error {
		if name == "" {
			return errors.New(`scheduler: replica name is empty: give one that tells replicas apart, e.g. "worker-1", or leave the option out for hostname-pid`)
		}
		cfg.replica = name
		return nil
	}
}

// WithLogger sets the logger. Default: slog.Default() as it is when New is called. The
// scheduler logs only what needs attention at Warn (failed runs, lost leases, unavailable or
// quarantined nodes, missed ticks, locks that could not be released) and everything else
// (each tick's outcome) at Debug. To drop every line, give slog.New(slog.DiscardHandler).
// go-redis writes its own lines (failed dials) to its global logger, not to this one: the
// redlock package doc ("Logs") shows how a program routes them here.
func WithLogger(l *slog.Logger) Option {
	return func(cfg *config) error {
		if l == nil {
			return errors.New("scheduler: WithLogger(nil): give a logger, or leave the option out to log to slog.Default()")
		}
		cfg.logger = l
		return nil
	}
}

// WithMiddleware adds middleware around every job, outside the built-in chain (Retry, Lock,
// Timeout, Recover): it sees each tick once, with the final outcome (see middleware.Outcome).
// It also sees each run of another replica that this scheduler recorded as interrupted (a
// running scheduler looks for runs whose replica vanished every 10s: docs/guarantees.md,
// "Interrupted runs"): a call whose context carries that run's job.Run and whose handler
// only returns an error matching middleware.ErrInterrupted, so that Metrics counts it and
// Trace records it. Given several times, the middleware add up, outermost first.
func WithMiddleware(ms ...middleware.Middleware) Option {
	return func(cfg *config) error {
		for i, m := range ms {
			if m == nil {
				return fmt.Errorf("scheduler: WithMiddleware: middleware %d is nil", i)
			}
		}
		cfg.middleware = append(cfg.middleware, ms...)
		return nil
	}
}

// WithLocation sets the time zone of cron specs that do not start with CRON_TZ=. Default
// UTC — not time.Local: replicas whose hosts have different local zones would compute
// different ticks and run them twice. "@every" specs do not depend on it.
func WithLocation(loc *time.Location) Option {
	return func(cfg *config) error {
		if loc == nil {
			return errors.New("scheduler: WithLocation(nil): give a location, e.g. time.UTC")
		}
		cfg.loc = loc
		return nil
	}
}

// WithMaxClockSkew sets how far apart the replicas' clocks may be. Default 1s. A replica
// whose clock is within this bound of the others never runs a tick another one finished;
// the tick retention must exceed twice this bound.
func WithMaxClockSkew(d time.Duration) Option {
	return func(cfg *config) error {
		if d < 0 {
			return fmt.Errorf("scheduler: max clock skew %v is negative: give how far apart the replicas' clocks may be, e.g. 1s", d)
		}
		cfg.maxSkew = d
		return nil
	}
}

// WithTickRetention sets how long a tick that ran is kept as done on the lock nodes.
// Default max(2·MaxClockSkew + 1s, 1 min). It must exceed 2·MaxClockSkew: a tick is attempted
// (first try or retry) only until retention − 2·MaxClockSkew after it, so that however skewed
// the clocks, a replica still finds the done marker of a run that succeeded. A job with a
// CatchUp window or a Jitter keeps its ticks longer if it needs to: max(retention,
// max(CatchUp, Jitter) + 2·MaxClockSkew + 1s), so that its window is at least a second
// longer than either.
func WithTickRetention(d time.Duration) Option {
	return func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("scheduler: tick retention %v: must be positive, e.g. 1m", d)
		}
		cfg.retention, cfg.retentionSet = d, true
		return nil
	}
}

// WithLockConcurrency bounds how many tick locks this scheduler requests at once (across all
// its jobs; runs themselves are not bounded). Default 10·GOMAXPROCS, go-redis's default pool
// size per node. Without a bound, a burst of ticks due at the same instant (thousands of jobs
// on one spec) waits in the node clients' connection pools past the node timeout, fails as
// "quorum unavailable" and is tried again, and throughput collapses; with it, the burst
// queues and is served at the rate the nodes answer. Keep it at most the pool size of the
// node clients.
func WithLockConcurrency(n int) Option {
	return func(cfg *config) error {
		if n <= 0 {
			return fmt.Errorf("scheduler: lock concurrency %d: must be positive, e.g. the node clients' pool size (go-redis: 10·GOMAXPROCS)", n)
		}
		cfg.lockConc = n
		return nil
	}
}

// WithHistorySize sets how many records of each job's runs the lock nodes keep (History).
// Default 100. 0 keeps none, and saves the request per node that each record costs.
func WithHistorySize(n int) Option {
	return func(cfg *config) error {
		if n < 0 {
			return fmt.Errorf("scheduler: history size %d is negative: give how many records of each job's runs to keep, e.g. %d, or 0 for none", n, scheddefault.HistorySize)
		}
		cfg.historySize = n
		return nil
	}
}

// withTriggerPoll sets how often a running scheduler reads the queue of manual runs
// (Trigger) from the nodes, in case an announcement was lost, and for the requests that
// waited for a run of their job to end (Overlap Forbid). Default 1s; each look is one
// request per node, whatever the number of jobs.
func withTriggerPoll(d time.Duration) Option {
	return positive("trigger poll", d, scheddefault.TriggerPoll, func(cfg *config) *time.Duration { return &cfg.triggerPoll })
}

// withRescueEvery sets how often a running scheduler looks at the runs of its jobs in flight
// anywhere in the cluster, to record as interrupted those whose replica vanished (killed, or
// frozen past its lease) without recording their end. Default 10s; each look is one request
// per node per job, plus one per node for each run in flight. A killed run is recorded
// interrupted within its lock's TTL (job.Options.LockTTL) plus two of these periods: one look
// finds its lock gone, the next one (giving a slow replica time to write its own record)
// records it. Without history (WithHistorySize(0)) nothing is in flight and nothing is looked at.
// The daemon (--rescue-every) and tests set it through schedseam.WithRescueEvery.
func withRescueEvery(d time.Duration) Option {
	return positive("rescue period", d, scheddefault.RescueEvery, func(cfg *config) *time.Duration { return &cfg.rescueEvery })
}

// withHeartbeat sets how often a running scheduler writes its heartbeat to the lock nodes
// (Replicas): its name, version, start, jobs, configuration hash and runs in flight. Default
// 10s; each heartbeat is one request per node. Readers count a replica missing once its last
// heartbeat is older than three intervals plus the max clock skew. The daemon (--heartbeat)
// and tests set it through schedseam.WithHeartbeat.
func withHeartbeat(d time.Duration) Option {
	return positive("heartbeat", d, scheddefault.Heartbeat, func(cfg *config) *time.Duration { return &cfg.heartbeat })
}

// positive returns the option that sets the period that field points to in a config to d,
// refusing a d that is not positive with an error that names what it is and gives its
// default.
func positive(what string, d, def time.Duration, field func(*config) *time.Duration) Option {
	return func(cfg *config) error {
		if d <= 0 {
			return fmt.Errorf("scheduler: %s %v: must be positive, e.g. %v", what, d, def)
		}
		*field(cfg) = d
		return nil
	}
}

// withVersion sets the version of the program that the heartbeats report (Replica.Version).
// Default: the main module's version from the Go build information ("(devel)" for a local
// build). The daemon sets its release version through schedseam.WithVersion.
func withVersion(v string) Option {
	return func(cfg *config) error {
		cfg.version = v
		return nil
	}
}

// finish applies the defaults that depend on other options, and checks them together.
func (cfg *config) finish() error {
	if !cfg.retentionSet {
		cfg.retention = max(2*cfg.maxSkew+time.Second, time.Minute)
		return nil
	}
	if cfg.retention <= 2*cfg.maxSkew {
		return fmt.Errorf("scheduler: tick retention %v must exceed twice the max clock skew (%v), or a skewed replica could run a done tick again; e.g. WithTickRetention(%v)",
			cfg.retention, 2*cfg.maxSkew, max(2*cfg.maxSkew+time.Second, time.Minute))
	}
	return nil
}

// notForControl names the options given that set what only a Scheduler uses (NewControl).
func (cfg *config) notForControl() []string {
	d := defaultConfig()
	var names []string
	for _, o := range []struct {
		set  bool
		name string
	}{
		{len(cfg.middleware) > 0, "WithMiddleware"},
		{cfg.loc != d.loc, "WithLocation"},
		{cfg.retentionSet, "WithTickRetention"},
		{cfg.lockConc != d.lockConc, "WithLockConcurrency"},
		{cfg.historySize != d.historySize, "WithHistorySize"},
		{cfg.triggerPoll != d.triggerPoll, "schedseam.WithTriggerPoll"},
		{cfg.rescueEvery != d.rescueEvery, "schedseam.WithRescueEvery"},
		{cfg.heartbeat != d.heartbeat, "schedseam.WithHeartbeat"},
		{cfg.version != d.version, "schedseam.WithVersion"},
	} {
		if o.set {
			names = append(names, o.name)
		}
	}
	return names
}

// newConfig applies opts to the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("scheduler: option %d is nil", i)
		}
		if err := o(&cfg); err != nil {
			return cfg, err
		}
	}
	return cfg, cfg.finish()
}
