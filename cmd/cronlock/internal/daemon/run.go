package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/buildinfo"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/exitcode"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/supervise"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/web"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// processStart is about when the process started (package variables are set before main).
var processStart = time.Now()

const runUsage = `Usage: cronlock run --config FILE [flags]

Runs the config's jobs as cluster-singleton cron jobs: run it with the same file on every
host, and each tick of each job runs on one host only, guarded by a Redlock over the config's
nodes. Each run starts the job's command in a process group of its own, under a supervisor
process, with CRONLOCK_JOB, CRONLOCK_TICK (RFC 3339, UTC), CRONLOCK_TICK_UNIX_MS,
CRONLOCK_FENCING_TOKEN, CRONLOCK_REPLICA and CRONLOCK_ATTEMPT in its environment; its output
is logged line by line. The process group gets SIGTERM --kill-grace before the run's lease
ends unless renewed, and SIGKILL when it ends, or when this daemon dies; when the run's
timeout passes or its lease is lost, SIGTERM at once and SIGKILL --kill-grace later (or at
the lease's end).

On SIGINT or SIGTERM it takes no new ticks, gives up the ticks that only wait for lock nodes,
waits up to --drain for running jobs (a second signal stops waiting), stops what is left,
releases its locks and exits 0. On SIGHUP it reloads the config file's jobs, and the crontab
it names (a file with errors is refused, and the running config kept). A config file (or crontab) that group or
others can write, or that another user than root or this one owns, is refused at start and at
reload (see docs/security.md).

Exit codes: 0 stopped by a signal, 1 runtime failure, 2 bad config or usage.

Flags:
`

// runFlags is the command line of run.
type runFlags struct {
	config    cli.ConfigFlags
	replica   string
	http      string
	killGrace time.Duration
	drain     time.Duration
	logLevel  slog.Level
	logFormat string
	heartbeat time.Duration
	web.Limits
	set map[string]bool // flags given explicitly
}

func parseRun(args []string, stdout io.Writer) (runFlags, error) {
	fs, cf := cli.FlagSet("run")
	var f runFlags
	fs.StringVar(&f.replica, "replica", "", "this replica's `name`, shown as the holder of its locks (default: the config's replica:, else hostname-pid)")
	fs.StringVar(&f.http, "http", "", "`address` of the HTTP server for /healthz, /readyz, /jobs and /metrics, e.g. 127.0.0.1:9464 (default: the config's http:; \"off\" for none)")
	fs.DurationVar(&f.ReadTimeout, "http-read-timeout", 10*time.Second, "how long a client of the HTTP server may take to send a request, body included")
	fs.DurationVar(&f.IdleTimeout, "http-idle-timeout", 30*time.Second, "how long the HTTP server keeps an idle connection open between requests")
	fs.IntVar(&f.MaxConns, "http-max-conns", 128, "how many connections the HTTP server serves at once; more wait to be accepted")
	fs.Var((*optionalDuration)(&f.killGrace), "kill-grace", "`duration` from SIGTERM to SIGKILL of a run's process group, which gets SIGKILL when its lease ends (default: the config's kill_grace:, else 10s or half of lock_ttl − renew_every)")
	fs.DurationVar(&f.drain, "drain", 30*time.Second, "on SIGINT/SIGTERM, how long running jobs may finish before they are stopped")
	fs.TextVar(&f.logLevel, "log-level", slog.LevelInfo, "least `level` logged: debug (every tick's outcome), info, warn or error")
	fs.DurationVar(&f.heartbeat, "heartbeat", scheduler.DefaultHeartbeat, "how often this replica writes its heartbeat to the lock nodes (cronlock replicas); it shows as missing after 3 of them plus 1s")
	fs.StringVar(&f.logFormat, "log-format", "text", "`format` of the log on stderr: text (logfmt) or json (one object per line)")
	if err := cli.ParseFlags(fs, runUsage, args, stdout); err != nil {
		return f, err
	}
	f.config = *cf
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	switch {
	case f.killGrace < 0:
		return f, usageError{Err: fmt.Errorf("--kill-grace %v: must not be negative", f.killGrace)}
	case f.drain < 0:
		return f, usageError{Err: fmt.Errorf("--drain %v: must not be negative", f.drain)}
	case f.ReadTimeout <= 0 || f.IdleTimeout <= 0:
		return f, usageError{Err: fmt.Errorf("--http-read-timeout %v, --http-idle-timeout %v: give positive durations", f.ReadTimeout, f.IdleTimeout)}
	case f.heartbeat <= 0:
		return f, usageError{Err: fmt.Errorf("--heartbeat %v: give a positive interval, e.g. %v", f.heartbeat, scheduler.DefaultHeartbeat)}
	case f.MaxConns <= 0:
		return f, usageError{Err: fmt.Errorf("--http-max-conns %d: give a positive number of connections", f.MaxConns)}
	case f.set["replica"] && f.replica == "":
		return f, usageError{Err: errors.New("--replica is empty: give a name, or leave the flag out")}
	case f.logFormat != "text" && f.logFormat != "json":
		return f, usageError{Err: fmt.Errorf("--log-format %q: use text or json", f.logFormat)}
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
	logOut  *logWriter // where log writes (nil: not counted)

	clients   []redis.UniversalClient
	locks     *redlock.Client
	tel       *telemetry
	sched     *scheduler.Scheduler
	jobs      atomic.Pointer[config.Config] // the config whose jobs are registered (reload swaps it)
	current   map[string]*definition        // the registered definition of each job, by name
	defs      definitions
	gate      *gate
	lookupEnv func(string) (string, bool) // the daemon's environment, for env: (nil: os.LookupEnv)
	status    *web.JobStatus
	ready     *nodes.Readiness
	server    *http.Server
	serveWG   sync.WaitGroup
	probeWG   sync.WaitGroup
	stopProbe context.CancelFunc
}

// usageError is a mistake in the command line or the config: exit code 2.
type usageError = exitcode.Usage

// loggedError is an error that was logged already: main only sets the exit code.
type loggedError = exitcode.Logged

// newLogger returns the daemon's logger, writing to w in the format and from the level of f.
func newLogger(w io.Writer, f runFlags) *slog.Logger {
	opts := &slog.HandlerOptions{Level: f.logLevel}
	if f.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// logErrors logs err at error level with msg, each error of a join on a line of its own.
func logErrors(log *slog.Logger, msg string, err error) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		log.Error(msg, "err", e)
	}
}

// Run runs `cronlock run` with the command line args (after "run") until ctx ends.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f, err := parseRun(args, stdout)
	if err != nil {
		return err
	}
	// A log line written to a pipe whose reader went away fails, and is counted (logWriter),
	// instead of killing the daemon with its runs: Go kills a program that writes to a broken
	// pipe on fd 1 or 2 unless it is notified of SIGPIPE (or ignores it; but an ignored signal
	// stays ignored across exec, a notified one does not).
	pipes := make(chan os.Signal, 1) // never read: a signal that finds it full is dropped
	signal.Notify(pipes, syscall.SIGPIPE)
	defer signal.Stop(pipes)
	// From here on every line goes through the daemon's log: go-redis's and OpenTelemetry's too.
	out := &logWriter{w: stderr}
	log := newLogger(out, f)
	nodes.LogRedisTo(log)
	defer nodes.LogRedisTo(nil)
	logOTelTo(log)
	defer logOTelTo(nil)
	if err := runDaemon(ctx, f, log, out); err != nil {
		logErrors(log, "cronlock run", err)
		return loggedError{Err: err}
	}
	return nil
}

// runDaemon runs the daemon until ctx ends, it drained and stopped. Its log writes to out.
func runDaemon(ctx context.Context, f runFlags, log *slog.Logger, out *logWriter) error {
	cfg, err := f.config.Load("run")
	if err != nil {
		return err
	}
	// Signals that arrive while draining: the first one also ended ctx (in main).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	hups := make(chan os.Signal, 1)
	signal.Notify(hups, syscall.SIGHUP)
	defer signal.Stop(hups)

	d := &daemon{cfg: cfg, flags: f, status: web.NewJobStatus(), gate: newGate(), log: log, logOut: out}
	if err := d.start(); err != nil {
		d.close()
		return err
	}
	serveErr := make(chan error, 1)
	if d.server != nil {
		ln, err := web.Listen(d.server, f.MaxConns, d.log)
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
	d.probeWG.Go(func() { d.ready.Watch(probeCtx, d.log, d.cfg) })

	var failure error
wait:
	for {
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
			d.gate.close() // before the line: no run starts after it
			d.log.Info("stopping: no new ticks; waiting for running jobs", "drain", f.drain)
			break wait
		case err := <-serveErr:
			failure = fmt.Errorf("http: %w", err)
			d.gate.close()
			d.log.Error("stopping: the HTTP server failed", "err", err)
			break wait
		case <-hups:
			d.reload()
		}
	}
	d.ready.Stop()

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
		d.replica = nodes.DefaultReplica()
	}
	addr := cfg.HTTP
	if f.set["http"] {
		addr = config.ListenAddr(f.http)
		if f.http == "off" {
			addr = ""
		}
	}
	if addr != "" { // the token's variable is checked as the nodes' passwords are
		if _, err := cfg.HTTPToken(nil); err != nil {
			return usageError{Err: err}
		}
	}
	var err error
	if d.clients, err = nodes.Clients(cfg); err != nil {
		return err
	}
	d.ready = nodes.NewReadiness(cfg, d.clients, d.jobs.Load)
	locks, err := nodes.LockClient(cfg, d.clients, d.replica)
	if err != nil {
		return usageError{Err: fmt.Errorf("%s: nodes: %w", cfg.File, err)}
	}
	if d.tel, err = newTelemetry(cfg); err != nil {
		_ = locks.Close()
		return usageError{Err: err}
	}
	d.sched, err = scheduler.New(locks,
		scheduler.WithReplica(d.replica),
		scheduler.WithPrefix(cfg.Prefix),
		scheduler.WithLogger(d.log),
		scheduler.WithHeartbeat(f.heartbeat),
		scheduler.WithVersion(buildinfo.Read().Version),
		scheduler.WithMiddleware(append(append([]middleware.Middleware{d.status.Middleware(d.replica)}, d.tel.middleware()...), d.gate.middleware())...),
	)
	if err != nil {
		_ = locks.Close()
		return usageError{Err: fmt.Errorf("%s: %w", cfg.File, err)}
	}
	d.locks = locks
	if _, err := d.sched.RegisterGauges(d.tel.meters); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := d.tel.registerReadiness(d.ready); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if err := d.tel.registerBuildInfo(); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	if d.logOut != nil {
		if err := d.logOut.register(d.tel.meters); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	defs, err := d.buildJobs(cfg)
	if err != nil {
		return usageError{Err: err}
	}
	d.current = map[string]*definition{}
	for i, def := range defs {
		d.warnHostProblems(cfg.Jobs[i])
		if err := d.sched.Add(def.job); err != nil {
			return usageError{Err: cfg.JobError(i, err)}
		}
		middleware.ZeroRuns(d.tel.meters, def.job.Name)
		d.current[def.job.Name] = def
	}
	d.jobs.Store(cfg)
	d.sched.SetConfigHash(configHash(cfg))
	if addr != "" {
		d.server = web.NewServer(addr, web.Handler(d.jobs.Load, d.replica, d.sched, d.status, d.ready.Report, d.tel.metrics), f.Limits, d.log)
	}
	return nil
}

// buildJobs builds the definition of each job of cfg — environment, kill grace, command and
// handler — and checks each one as the scheduler's Add does, on a scheduler of its own: the
// jobs it returns are accepted by Add. It changes nothing in the daemon. It returns every
// problem found, joined, each naming the file, line and key.
func (d *daemon) buildJobs(cfg *config.Config) ([]*definition, error) {
	check, err := scheduler.New(d.locks, scheduler.WithPrefix(cfg.Prefix))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", cfg.File, err)
	}
	defer func() { _ = check.Stop(context.Background()) }() // never started: returns at once
	defs := make([]*definition, len(cfg.Jobs))
	var errs []error
	for i, j := range cfg.Jobs {
		if defs[i], err = d.buildJob(cfg, i, j); err != nil {
			errs = append(errs, err)
		} else if err := check.Add(defs[i].job); err != nil {
			errs = append(errs, cfg.JobError(i, err))
		}
	}
	return defs, errors.Join(errs...)
}

// buildJob builds the definition of j, jobs[i] of cfg.
func (d *daemon) buildJob(cfg *config.Config, i int, j config.Job) (*definition, error) {
	killGrace := j.KillGrace
	if d.flags.set["kill-grace"] {
		var err error
		if killGrace, err = j.KillGraceFor(d.flags.killGrace, true); err != nil {
			return nil, cfg.JobError(i, fmt.Errorf("--kill-grace %w", err))
		}
	}
	env, err := j.Environ(d.lookupEnv)
	if err != nil {
		return nil, err
	}
	cj := &supervise.Command{Name: j.Name, Argv: j.Command, Env: append(jobEnviron(cfg), env...), Dir: j.WorkingDir,
		KillGrace: killGrace, Log: d.log, OutputLevel: j.OutputLevel, OutputLimit: j.OutputLimit, OutputKeep: int(j.OutputKeep)}
	def := &definition{}
	def.job = job.Job{Name: j.Name, Spec: j.Schedule, Handler: d.handlerFor(def, cj), Options: j.Options()}
	return def, nil
}

// warnHostProblems logs why the job's runs on this host will fail, if they will: other hosts
// may have its program.
func (d *daemon) warnHostProblems(j config.Job) {
	for _, err := range hostProblems(j) {
		d.log.Warn("the job's runs on this host will fail", "job", j.Name, "err", err)
	}
}

// hostProblems are the reasons why the job cannot run on this host: its program is not
// found, its working_dir is not a directory.
func hostProblems(j config.Job) []error {
	var errs []error
	if _, err := exec.LookPath(j.Command[0]); err != nil {
		errs = append(errs, err)
	}
	if j.WorkingDir != "" {
		if fi, err := os.Stat(j.WorkingDir); err != nil {
			errs = append(errs, fmt.Errorf("working_dir: %w", err))
		} else if !fi.IsDir() {
			errs = append(errs, fmt.Errorf("working_dir %s is not a directory", j.WorkingDir))
		}
	}
	return errs
}

// handlerFor returns the handler of def, which runs cj: unless the daemon is stopping, or a
// reload replaced def, or def must not overlap a run of the definition it replaced (see
// definitions), it notes the run for /jobs, then runs the command.
func (d *daemon) handlerFor(def *definition, cj *supervise.Command) job.Handler {
	return func(ctx context.Context) error {
		if !d.gate.enter(ctx) {
			return errStopping
		}
		defer d.gate.leave(ctx)
		if err := d.defs.start(def, d.replica); err != nil {
			return err
		}
		defer d.defs.end(def)
		if run, ok := job.RunFrom(ctx); ok {
			web.Started(ctx, run.FencingToken)
		}
		return cj.Run(ctx)
	}
}

// reload reads the config file again, on SIGHUP: added jobs start, removed jobs take no new
// ticks (a run under way finishes under its lease), changed jobs take effect at their next
// tick. A job added with the command of a removed one is that job renamed; the runs of a job
// renamed, or changed, that forbids overlap do not start while a run of its old definition is
// running here (see definitions). The new file is checked completely first — every job built
// and checked as the scheduler's Add does — and only then applied, so the apply cannot fail
// halfway: a file with an error, or that changes more than jobs and kill_grace, is refused,
// and the running config kept whole.
func (d *daemon) reload() {
	cfg, err := d.flags.config.Read()
	if err == nil {
		err = sameSettings(d.cfg, cfg)
	}
	var defs []*definition
	if err == nil {
		defs, err = d.buildJobs(cfg)
	}
	if err != nil {
		logErrors(d.log, "reload: config refused, the running one is kept", err)
		return
	}
	old := map[string]config.Job{}
	for _, j := range d.jobs.Load().Jobs {
		old[j.Name] = j
	}
	kept := map[string]bool{}
	for _, j := range cfg.Jobs {
		kept[j.Name] = true
	}
	var gone []config.Job // the jobs removed, in file order
	for _, j := range d.jobs.Load().Jobs {
		if !kept[j.Name] {
			gone = append(gone, j)
		}
	}
	var added, changed int
	for i, j := range cfg.Jobs {
		prev, ok := old[j.Name]
		prev.Line, j.Line = 0, 0
		switch {
		case ok && reflect.DeepEqual(prev, j):
			continue
		case ok:
			d.defs.replace(defs[i], d.current[j.Name])
			_ = d.sched.Remove(j.Name) // registered: no error
			changed++
			d.log.Info("reload: job changed: the change takes effect at its next tick", "job", j.Name)
		default:
			var renamed []*definition
			var from []string
			for _, g := range gone {
				if slices.Equal(g.Command, j.Command) {
					renamed, from = append(renamed, d.current[g.Name]), append(from, g.Name)
				}
			}
			d.defs.replace(defs[i], renamed...)
			added++
			if from != nil {
				d.log.Info("reload: job added, renamed from a removed job with its command", "job", j.Name, "from", from)
			} else {
				d.log.Info("reload: job added", "job", j.Name)
			}
		}
		d.current[j.Name] = defs[i]
		d.warnHostProblems(j)
		if err := d.sched.Add(defs[i].job); err != nil { // checked by buildJobs: only if the scheduler stopped
			d.log.Error("reload: job not added", "job", j.Name, "err", err)
		}
		middleware.ZeroRuns(d.tel.meters, j.Name)
	}
	for _, g := range gone {
		d.defs.replace(nil, d.current[g.Name])
		delete(d.current, g.Name)
		_ = d.sched.Remove(g.Name)
		d.log.Info("reload: job removed: it takes no new ticks; a run under way finishes under its lease", "job", g.Name)
	}
	d.jobs.Store(cfg)
	d.sched.SetConfigHash(configHash(cfg))
	d.log.Info("reloaded", "file", cfg.File, "jobs", len(cfg.Jobs), "added", added, "changed", changed, "removed", len(gone))
}

// configHash is the hash of cfg's jobs that the heartbeats report (scheduler.Replica.ConfigHash):
// what a reload can change, without where each job is written (file, line).
func configHash(cfg *config.Config) string {
	h := sha256.New()
	for _, j := range cfg.Jobs {
		fmt.Fprintf(h, "%q %q %q %v %v %v %v %v %v %v %v %v %q %v\n", j.Name, j.Schedule, j.Command, j.Timeout, j.LockTTL, j.RenewEvery,
			j.Overlap, j.Retries, j.CatchUp, j.Jitter, j.OutputLevel, j.OutputLimit, j.WorkingDir, j.KillGrace)
		for _, e := range j.Env {
			fmt.Fprintf(h, "\t%q=%q\n", e.Name, e.Value)
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// sameSettings returns an error naming the first setting other than jobs: and kill_grace:
// that differs between the running config and a reloaded one: those need a restart.
func sameSettings(running, next *config.Config) error {
	nodes := func(c *config.Config) []string {
		var out []string
		for _, n := range c.Nodes {
			out = append(out, fmt.Sprintf("%s|%s|%s|%v|%d|%d", n.Name(), n.Username, n.PasswordEnv, n.TLS, n.DB, n.WaitForReplicas))
		}
		return out
	}
	for _, s := range []struct {
		key      string
		was, now any
	}{
		{"wait_for_replicas", running.WaitForReplicas, next.WaitForReplicas},
		{"nodes", nodes(running), nodes(next)},
		{"allow_even_nodes", running.AllowEvenNodes, next.AllowEvenNodes},
		{"prefix", running.Prefix, next.Prefix},
		{"replica", running.Replica, next.Replica},
		{"http", running.HTTP, next.HTTP},
		{"tracing", running.Tracing, next.Tracing},
		{"boot_key", running.BootKey, next.BootKey},
		{"max_ttl", running.MaxTTL, next.MaxTTL},
	} {
		if !reflect.DeepEqual(s.was, s.now) {
			return fmt.Errorf("%s: %s changed: only jobs: and kill_grace: change on SIGHUP; restart the daemon for %s", next.File, s.key, s.key)
		}
	}
	return nil
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
	if d.locks != nil {
		_ = d.locks.Close()
	}
	if d.tel != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.tel.shutdown(ctx); err != nil {
			d.log.Warn("telemetry: could not flush", "err", err)
		}
		cancel()
	}
	nodes.Close(d.clients)
}

// jobEnviron is the environment of the jobs' commands: the daemon's, without the variables
// that hold the nodes' passwords and the HTTP server's token (a job has no business with the
// lock nodes or the control endpoints).
func jobEnviron(cfg *config.Config) []string {
	secret := map[string]bool{}
	if cfg.HTTPTokenEnv != "" {
		secret[cfg.HTTPTokenEnv] = true
	}
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
