package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// processStart is about when the process started (package variables are set before main).
var processStart = time.Now()

const runUsage = `Usage: cronlock run --config FILE [flags]

Runs the config's jobs as cluster-singleton cron jobs: run it with the same file on every
host, and each tick of each job runs on one host only, guarded by a Redlock over the config's
nodes. Each run starts the job's command in a process group of its own, with CRONLOCK_JOB,
CRONLOCK_TICK (RFC 3339, UTC), CRONLOCK_TICK_UNIX_MS, CRONLOCK_FENCING_TOKEN,
CRONLOCK_REPLICA and CRONLOCK_ATTEMPT in its environment; its output is logged line by line.
When the run's lease is lost or its timeout passes, the process group gets SIGTERM, then
SIGKILL after --kill-grace.

On SIGINT or SIGTERM it takes no new ticks, waits up to --drain for running jobs (a second
signal stops waiting), stops what is left, releases its locks and exits 0.

Exit codes: 0 stopped by a signal, 1 runtime failure, 2 bad config or usage.

Flags:
`

// runFlags is the command line of run.
type runFlags struct {
	config    string
	replica   string
	http      string
	killGrace time.Duration
	drain     time.Duration
	logLevel  slog.Level
	set       map[string]bool // flags given explicitly
}

func parseRun(args []string, stdout io.Writer) (runFlags, error) {
	fs, path := flagSet("run")
	var f runFlags
	fs.StringVar(&f.replica, "replica", "", "this replica's `name`, shown as the holder of its locks (default: the config's replica:, else hostname-pid)")
	fs.StringVar(&f.http, "http", "", "`address` of the HTTP server for /healthz, /readyz, /jobs and /metrics, e.g. 127.0.0.1:9464 (default: the config's http:; \"off\" for none)")
	fs.Var((*optionalDuration)(&f.killGrace), "kill-grace", "`duration` between SIGTERM and SIGKILL to a job's process group (default: the config's kill_grace:, else 10s)")
	fs.DurationVar(&f.drain, "drain", 30*time.Second, "on SIGINT/SIGTERM, how long running jobs may finish before they are stopped")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "least `level` logged: debug (every tick's outcome), info, warn or error")
	if err := parseFlags(fs, runUsage, args, stdout); err != nil {
		return f, err
	}
	f.config = *path
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	switch {
	case f.killGrace < 0:
		return f, usageError{fmt.Errorf("--kill-grace %v: must not be negative", f.killGrace)}
	case f.drain < 0:
		return f, usageError{fmt.Errorf("--drain %v: must not be negative", f.drain)}
	case f.set["replica"] && f.replica == "":
		return f, usageError{errors.New("--replica is empty: give a name, or leave the flag out")}
	}
	return f, nil
}

// optionalDuration is a duration flag whose default is not printed: it is the config's.
type optionalDuration time.Duration

func (d *optionalDuration) String() string {
	if d == nil || *d == 0 {
		return ""
	}
	return time.Duration(*d).String()
}

func (d *optionalDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	*d = optionalDuration(v)
	return err
}

// daemon is a running `cronlock run`.
type daemon struct {
	cfg     *config.Config
	flags   runFlags
	replica string
	log     *slog.Logger

	clients    []*redis.Client
	closeLocks func() error
	tel        *telemetry
	sched      *scheduler.Scheduler
	status     *jobStatus
	ready      *readiness
	server     *http.Server
	serveWG    sync.WaitGroup
	probeWG    sync.WaitGroup
	stopProbe  context.CancelFunc
}

func runCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRun(args, stdout)
	if err != nil {
		return err
	}
	cfg, err := loadConfig("run", f.config)
	if err != nil {
		return err
	}
	// Signals that arrive while draining: the first one also ended ctx (in main).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)

	d := &daemon{cfg: cfg, flags: f, status: newJobStatus()}
	d.log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.logLevel}))
	logRedisTo(d.log)
	defer logRedisTo(nil)
	if err := d.start(); err != nil {
		d.close()
		return err
	}
	serveErr := make(chan error, 1)
	if d.server != nil {
		ln, err := net.Listen("tcp", d.server.Addr)
		if err != nil {
			d.close()
			return fmt.Errorf("http: %w", err)
		}
		d.log.Info("http: serving /healthz /readyz /jobs /metrics", "addr", ln.Addr().String())
		d.serveWG.Go(func() {
			if err := d.server.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				serveErr <- err
			}
		})
	}
	if err := d.sched.Start(); err != nil {
		d.close()
		return err
	}
	d.log.Info("ready: taking ticks", "replica", d.replica, "jobs", len(cfg.Jobs), "nodes", len(cfg.Nodes),
		"quorum", cfg.Quorum(), "startup", time.Since(processStart).Round(time.Microsecond))
	probeCtx, stopProbe := context.WithCancel(context.Background())
	d.stopProbe = stopProbe
	d.probeWG.Go(func() { d.probeNodes(probeCtx) })

	var failure error
	select {
	case <-ctx.Done():
		// The signal that ended ctx (main's signal.NotifyContext) comes to sigs too: take it
		// now, or the drain would count it as a second one.
		if cause := context.Cause(ctx); cause != ctx.Err() && strings.HasSuffix(cause.Error(), "signal received") {
			select {
			case <-sigs:
			case <-time.After(time.Second):
			}
		}
		d.log.Info("stopping: no new ticks; waiting for running jobs", "drain", f.drain)
	case err := <-serveErr:
		failure = fmt.Errorf("http: %w", err)
		d.log.Error("stopping: the HTTP server failed", "err", err)
	}
	d.ready.stop.Store(true)

	drainCtx, cancel := context.WithTimeoutCause(context.Background(), f.drain,
		fmt.Errorf("--drain %v passed", f.drain))
	defer cancel()
	stopDrain := make(chan struct{})
	var drainWG sync.WaitGroup
	drainWG.Go(func() {
		select {
		case sig := <-sigs:
			d.log.Warn("second signal: stopping running jobs now", "signal", sig)
			cancel()
		case <-stopDrain:
		}
	})
	if err := d.sched.Stop(drainCtx); err != nil {
		d.log.Warn("running jobs were stopped before they finished", "err", err)
	}
	close(stopDrain)
	drainWG.Wait()
	d.close()
	if failure == nil {
		d.log.Info("stopped")
	}
	return failure
}

// start checks the config against this host, makes the clients and the scheduler and adds
// the jobs; it starts nothing. Errors of the config are usageErrors.
func (d *daemon) start() error {
	cfg, f := d.cfg, d.flags
	d.replica = cfg.Replica
	if f.set["replica"] {
		d.replica = f.replica
	}
	if d.replica == "" {
		d.replica = defaultReplica()
	}
	killGrace := cfg.KillGrace
	if f.set["kill-grace"] {
		killGrace = f.killGrace
	}
	addr := cfg.HTTP
	if f.set["http"] {
		addr = f.http
		if addr == "off" {
			addr = ""
		}
	}
	var err error
	if d.clients, err = nodeClients(cfg); err != nil {
		return err
	}
	d.ready = &readiness{clients: d.clients, quorum: cfg.Quorum()}
	locks, err := lockClient(cfg, d.clients, d.replica)
	if err != nil {
		return usageError{fmt.Errorf("%s: nodes: %w", cfg.File, err)}
	}
	if d.tel, err = newTelemetry(cfg); err != nil {
		_ = locks.Close()
		return usageError{err}
	}
	d.sched, err = scheduler.New(locks,
		scheduler.WithReplica(d.replica),
		scheduler.WithPrefix(cfg.Prefix),
		scheduler.WithLogger(d.log),
		scheduler.WithMiddleware(append([]middleware.Middleware{d.status.middleware(d.replica)}, d.tel.middleware()...)...),
	)
	if err != nil {
		_ = locks.Close()
		return usageError{fmt.Errorf("%s: %w", cfg.File, err)}
	}
	d.closeLocks = locks.Close
	if err := registerJobGauges(d.tel.meters, d.sched); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	env := jobEnviron(cfg)
	for i, j := range cfg.Jobs {
		if _, err := exec.LookPath(j.Command[0]); err != nil {
			d.log.Warn("the job's program is not found on this host: its runs here will fail", "job", j.Name, "err", err)
		}
		cj := &commandJob{name: j.Name, argv: j.Command, env: env, killGrace: killGrace, log: d.log}
		err := d.sched.Add(job.Job{Name: j.Name, Spec: j.Schedule, Handler: handlerFor(cj), Options: j.Options()})
		if err != nil {
			return usageError{fmt.Errorf("%s:%d: jobs[%d]: %w", cfg.File, j.Line, i, err)}
		}
	}
	if addr != "" {
		d.server = &http.Server{
			Addr:              addr,
			Handler:           statusHandler(cfg, d.replica, d.sched, d.status, d.ready, d.tel.metrics),
			ReadHeaderTimeout: 5 * time.Second,
		}
	}
	return nil
}

// handlerFor returns the job's handler: it notes the run for /jobs, then runs the command.
func handlerFor(cj *commandJob) job.Handler {
	return func(ctx context.Context) error {
		if run, ok := job.RunFrom(ctx); ok {
			started(ctx, run.FencingToken)
		}
		return cj.run(ctx)
	}
}

// close stops the HTTP server and the probes, and closes the lock client and the node clients.
func (d *daemon) close() {
	if d.server != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = d.server.Shutdown(ctx)
		cancel()
		d.serveWG.Wait()
	}
	if d.stopProbe != nil {
		d.stopProbe()
	}
	d.probeWG.Wait()
	if d.sched != nil {
		_ = d.sched.Stop(context.Background()) // no-op after the drain; frees a scheduler never started
	}
	if d.closeLocks != nil {
		_ = d.closeLocks()
	}
	if d.tel != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.tel.shutdown(ctx); err != nil {
			d.log.Warn("telemetry: could not flush", "err", err)
		}
		cancel()
	}
	closeClients(d.clients)
}

// probeNodes logs, once at start, the nodes that do not answer and those whose quarantine
// keeps them from granting locks.
func (d *daemon) probeNodes(ctx context.Context) {
	reachable := 0
	var mu sync.Mutex
	eachNode(ctx, d.clients, 2*time.Second, func(ctx context.Context, i int, c *redis.Client) {
		addr := c.Options().Addr
		q, err := readQuarantine(ctx, c, d.cfg.BootKey)
		if err != nil {
			if !errors.Is(ctx.Err(), context.Canceled) { // not stopping
				d.log.Warn("node does not answer", "node", addr, "err", err)
			}
			return
		}
		mu.Lock()
		reachable++
		mu.Unlock()
		switch {
		case q.missing:
			d.log.Warn("node has no boot marker: it is new or lost its memory, and will refuse locks for max_ttl after the first lock attempt; on first deployment end its quarantine with 'cronlock check --end-quarantine'",
				"node", addr, "max_ttl", d.cfg.MaxTTL, "boot_key", d.cfg.BootKey)
		case q.remaining > 0:
			d.log.Warn("node is in quarantine: it refuses locks until its boot marker's time", "node", addr, "remaining", q.remaining.Round(time.Millisecond))
		}
	})
	if reachable < d.cfg.Quorum() && ctx.Err() == nil {
		d.log.Warn("fewer nodes answer than a quorum: no job can run until enough come back",
			"reachable", reachable, "nodes", len(d.clients), "quorum", d.cfg.Quorum())
	}
}

// quarantine is a node's boot marker, read against its clock.
type quarantine struct {
	missing   bool
	value     string
	remaining time.Duration // > 0 while in quarantine
	nodeTime  time.Time
}

// readQuarantine reads a node's boot marker (microseconds of the node's clock at which its
// quarantine ends) and its clock.
func readQuarantine(ctx context.Context, c *redis.Client, bootKey string) (quarantine, error) {
	var q quarantine
	pipe := c.Pipeline()
	get := pipe.Get(ctx, bootKey)
	tm := pipe.Time(ctx)
	_, err := pipe.Exec(ctx)
	if err != nil && !errors.Is(err, redis.Nil) {
		return q, err
	}
	q.nodeTime = tm.Val()
	v, err := get.Result()
	if errors.Is(err, redis.Nil) {
		q.missing = true
		return q, nil
	}
	q.value = strings.TrimSpace(v)
	var until int64
	if _, err := fmt.Sscan(q.value, &until); err == nil {
		q.remaining = time.UnixMicro(until).Sub(q.nodeTime)
	}
	return q, nil
}

// jobEnviron is the environment of the jobs' commands: the daemon's, without the variables
// that hold the nodes' passwords (a job has no business with the lock nodes).
func jobEnviron(cfg *config.Config) []string {
	secret := map[string]bool{}
	for _, n := range cfg.Nodes {
		if n.PasswordEnv != "" {
			secret[n.PasswordEnv] = true
		}
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !secret[name] {
			env = append(env, kv)
		}
	}
	return env
}
