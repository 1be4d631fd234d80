package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// processStart is about when the process started (package variables are set before main).
var processStart = time.Now()

// Flags is the command line of `cronlock run`, parsed by main (docs/cli.md documents each flag).
type Flags struct {
	Config    cli.ConfigFlags
	Replica   string        // --replica, when Set["replica"]; else the config's
	HTTP      string        // --http, when Set["http"]; "off" for no server
	KillGrace time.Duration // --kill-grace, when Set["kill-grace"]; else the config's
	Drain     time.Duration
	LogLevel  slog.Level
	LogFormat string // "text" or "json"
	Heartbeat time.Duration
	// RescueEvery is how often the scheduler looks for vanished runs (--rescue-every).
	RescueEvery time.Duration
	web.Limits
	Set map[string]bool // the flags given explicitly
}

// daemon is a running `cronlock run`.
type daemon struct {
	cfg     *config.Config
	flags   Flags
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
	// killGrace is the longest kill grace of the jobs' runs (buildJob); runsLeft says that the
	// drain left runs under way (drain).
	killGrace time.Duration
	runsLeft  bool
}

// usageError is a mistake in the command line or the config: exit code 2.
type usageError = exitcode.Usage

// loggedError is an error that was logged already: main only sets the exit code.
type loggedError = exitcode.Logged

// newLogger returns the daemon's logger, writing to w in the format and from the level of f.
func newLogger(w io.Writer, f Flags) *slog.Logger {
	opts := &slog.HandlerOptions{Level: f.LogLevel}
	if f.LogFormat == "json" {
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

// Run runs `cronlock run` with the command line f until ctx ends.
func Run(ctx context.Context, f Flags, stderr io.Writer) error {
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
func runDaemon(ctx context.Context, f Flags, log *slog.Logger, out *logWriter) error {
	cfg, err := f.Config.Load("run")
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
			d.log.Info("stopping: no new ticks; waiting for running jobs", "drain", f.Drain)
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
	d.drain(sigs)
	d.close()
	if failure == nil {
		d.log.Info("stopped")
	}
	return failure
}

// start checks the config against this host (prepare), makes the telemetry, the scheduler and
// the HTTP server, and adds the jobs; it starts nothing. Errors of the config are usageErrors.
func (d *daemon) start() error {
	cfg, f := d.cfg, d.flags
	p, err := d.prepare()
	if err != nil {
		return err
	}
	d.ready = nodes.NewReadiness(cfg, d.clients, d.jobs.Load)
	if d.tel, err = newTelemetry(cfg, p.spans); err != nil {
		return usageError{Err: err}
	}
	locks := d.locks
	d.sched, err = scheduler.New(locks,
		scheduler.WithReplica(d.replica),
		scheduler.WithPrefix(cfg.Prefix),
		scheduler.WithLogger(d.log),
		schedseam.WithHeartbeat(f.Heartbeat).(scheduler.Option),
		schedseam.WithRescueEvery(f.RescueEvery).(scheduler.Option),
		schedseam.WithVersion(buildinfo.Read().Version).(scheduler.Option),
		scheduler.WithMiddleware(append(append([]middleware.Middleware{d.status.Middleware(d.replica)}, d.tel.middleware()...), d.gate.middleware())...),
	)
	if err != nil {
		return usageError{Err: fmt.Errorf("%s: %w", cfg.File, err)}
	}
	if _, err := schedseam.RegisterGauges(d.sched, d.tel.meters); err != nil {
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
	d.current = map[string]*definition{}
	for i, def := range p.defs {
		d.warnHostProblems(cfg.Jobs[i])
		if err := d.sched.Add(def.job); err != nil {
			return usageError{Err: cfg.JobError(i, err)}
		}
		middleware.ZeroRuns(d.tel.meters, def.job.Name)
		d.current[def.job.Name] = def
	}
	d.jobs.Store(cfg)
	schedseam.SetConfigHash(d.sched, configHash(cfg))
	if p.addr != "" {
		d.server = web.NewServer(p.addr, web.Handler(d.jobs.Load, d.replica, d.sched, d.status, d.ready.Report, d.tel.metrics), f.Limits, d.log)
	}
	return nil
}

// buildJobs builds the definition of each job of cfg — environment, kill grace, command and
// handler — and checks each one as the scheduler's Add does (checkJob), without a scheduler:
// the jobs it returns are accepted by Add. It changes nothing in the daemon. It returns every
// problem found, joined, each naming the file, line and key.
func (d *daemon) buildJobs(cfg *config.Config) ([]*definition, error) {
	defs := make([]*definition, len(cfg.Jobs))
	var errs []error
	for i, j := range cfg.Jobs {
		var err error
		if defs[i], err = d.buildJob(cfg, i, j); err != nil {
			errs = append(errs, err)
		} else if err := checkJob(d.locks, defs[i].job); err != nil {
			errs = append(errs, cfg.JobError(i, err))
		}
	}
	return defs, errors.Join(errs...)
}

// buildJob builds the definition of j, jobs[i] of cfg.
func (d *daemon) buildJob(cfg *config.Config, i int, j config.Job) (*definition, error) {
	killGrace := j.KillGrace
	if d.flags.Set["kill-grace"] {
		var err error
		if killGrace, err = j.KillGraceFor(d.flags.KillGrace, true); err != nil {
			return nil, cfg.JobError(i, fmt.Errorf("--kill-grace %w", err))
		}
	}
	env, err := j.Environ(d.lookupEnv)
	if err != nil {
		return nil, err
	}
	d.killGrace = max(d.killGrace, killGrace)
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
	cfg, err := d.flags.Config.Read()
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
	schedseam.SetConfigHash(d.sched, configHash(cfg))
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

// endMargin is how long the daemon waits, besides the kill grace, for the runs it stopped to
// end: after SIGKILL their supervisors report, their output's last second is read, their locks
// are released and their records written.
const endMargin = 5 * time.Second

// drain stops the scheduler: running jobs get --drain to finish; then their commands get
// SIGTERM, and the runs get their longest kill grace (SIGKILL at its end) and endMargin to end.
// A signal cuts either wait short. Runs still under way after both are left: their locks are
// not released (close), their process groups die with the daemon (their supervisors' pipes
// close), and their locks expire after their TTL.
func (d *daemon) drain(sigs <-chan os.Signal) {
	f := d.flags
	err := d.stopWithin(sigs, f.Drain, fmt.Errorf("--drain %v passed", f.Drain), "second signal: stopping running jobs now")
	if err == nil {
		return
	}
	d.log.Warn("running jobs were stopped before they finished", "err", err)
	if !schedseam.RunsLeft(err) {
		return
	}
	wait := d.killGrace + endMargin
	err = d.stopWithin(sigs, wait, fmt.Errorf("the runs did not end within kill_grace %v and %v", d.killGrace, endMargin), "signal: exiting without waiting for the stopped runs to end")
	if !schedseam.RunsLeft(err) {
		return
	}
	d.runsLeft = true
	d.log.Error("exiting with runs under way: their locks are not released and expire after their lock_ttl; their process groups are killed as the daemon exits", "err", err)
}

// stopWithin stops the scheduler (Scheduler.Stop), letting running jobs go on until limit
// passes (then with cause) or a signal comes (logged with msg).
func (d *daemon) stopWithin(sigs <-chan os.Signal, limit time.Duration, cause error, msg string) error {
	ctx, cancel := context.WithTimeoutCause(context.Background(), limit, cause)
	defer cancel()
	stopped := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case sig := <-sigs:
			d.log.Warn(msg, "signal", sig)
			cancel()
		case <-stopped:
		}
	})
	err := d.sched.Stop(ctx)
	close(stopped)
	wg.Wait()
	return err
}

// close stops the HTTP server and the probes, and closes the lock client and the node clients.
// After a drain that left runs under way (drain), it neither waits for them nor closes the
// lock client, which would release their locks while their commands may still run.
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
	if d.sched != nil && !d.runsLeft {
		_ = d.sched.Stop(context.Background()) // no-op after the drain; frees a scheduler never started
	}
	if d.locks != nil && !d.runsLeft {
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
