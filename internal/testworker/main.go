// Command testworker is one replica of a cronlock worker, for the multi-process tests of
// package scheduler and the fault-injection suite (internal/chaos): it runs jobs with a
// scheduler whose clock may be offset, and records every run in a ledger on a separate Redis
// node.
//
// Each run RPUSHes to the list -ledger-key:
//
//	job|tick|replica|token|start|end|ctxCancelled|deadline|cause|write|writeAt|liveAfterWrite
//
// with tick in Unix milliseconds, start, end, writeAt and deadline (the run's context deadline
// when the job returned) in Unix nanoseconds of the real clock, ctxCancelled 0 or 1, and cause
// the context's cause (empty if not cancelled). When a run starts, it also RPUSHes
// job|tick|replica|token|start to -ledger-key + ":started". Every tick's outcome on this
// replica (middleware.Outcome) is RPUSHed to -ledger-key + ":outcomes" as
// job|tick|replica|outcome|fired|returned (Unix nanoseconds).
//
// A run works a random time between -work and -work-max, or until its context ends. With
// -fenced, runs of Forbid jobs then write their fencing token to a fenced store on the ledger
// node — whether or not their context is still live, as careless code would — and the record's
// write field says whether the store took it ("accepted", "rejected"; empty without -fenced).
// The store keeps the largest token per job in -fenced + ":" + job and refuses any token not
// larger, logging accepted writes to that key + ":accepted" and refused ones to ":rejected"
// (token|replica|tick|Unix nanoseconds). With -fenced-postgres instead, the store is a Postgres
// server (fencedstore.WritePostgres: package pgfence's check, which lets a token equal to the
// stored one pass, and the log in its table writes).
//
// With -burst N it also runs N Forbid jobs, burst-000 and on, all on -burst-spec (every one
// due at the same instants), each working between -burst-work and -burst-work-max and
// writing to the fenced store as the other Forbid jobs do.
//
// The worker stops gracefully after -duration, or on SIGTERM or SIGINT, with a -grace period
// for running jobs; it RPUSHes replica|stop to -ledger-key + ":stops", with stop the Unix
// nanoseconds right before it called Scheduler.Stop (no run may start after it), once Stop
// returned. With -check-leaks it then exits with status 3 if any goroutine is left. On SIGHUP it re-reads its clock offset from -offset-file (a Go duration),
// which steps its clock while it runs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/clocktest"
	"github.com/cronlock/cronlock/internal/fencedstore"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

var checkLeaks = flag.Bool("check-leaks", false, "after a graceful stop, exit with status 3 if goroutines are left")

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testworker:", err)
		os.Exit(1)
	}
	if *checkLeaks {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "testworker: goroutines left after stopping:", err)
			os.Exit(3)
		}
	}
}

type config struct {
	ledgerKey, fenced string
	fencedPG          string // DSN of the Postgres fenced store (-fenced-postgres)
	work, workMax     time.Duration
	fail              bool // every run fails (-fail)
	// freeze, once set (-freeze-after-run, or SIGUSR1; SIGUSR2 clears it), makes the next run
	// that was not cancelled stop this process with SIGSTOP right after it logged its end,
	// before its handler returns.
	freeze *atomic.Bool
}

func run() error {
	var (
		nodes      = flag.String("nodes", "", "comma-separated addresses of the lock nodes")
		ledger     = flag.String("ledger", "", "address of the ledger node")
		ledgerKey  = flag.String("ledger-key", "ledger", "ledger list key")
		jobs       = flag.String("job", "job", "comma-separated job names, each optionally followed by :allow or :replace (default :forbid)")
		spec       = flag.String("spec", "@every 1s", "job spec")
		replica    = flag.String("replica", "", "replica name (default hostname-pid)")
		offset     = flag.Duration("offset", 0, "offset of this replica's clock")
		offsetFile = flag.String("offset-file", "", "file with this replica's clock offset, re-read on SIGHUP")
		work       = flag.Duration("work", 5*time.Millisecond, "how long each run works (at least)")
		workMax    = flag.Duration("work-max", 0, "if above -work, each run works a random time up to this")
		replWork   = flag.Duration("replace-work", 0, "how long each run of a :replace job works, if not 0 (longer than the spec's interval: each run is replaced by the next tick)")
		fenced     = flag.String("fenced", "", "key prefix of the fenced store Forbid jobs write their tokens to")
		fencedPG   = flag.String("fenced-postgres", "", "DSN of a Postgres fenced store Forbid jobs write their tokens to, instead of -fenced")
		ttl        = flag.Duration("ttl", 0, "lock TTL (default 30s)")
		maxTTL     = flag.Duration("max-ttl", 0, "lock client MaxTTL, also the quarantine (default 1m)")
		catchUp    = flag.Duration("catchup", 0, "catch-up window")
		fail       = flag.Bool("fail", false, "every run fails (returns an error) once logged")
		freeze     = flag.Bool("freeze-after-run", false, "the first run stops this process (SIGSTOP) once logged, as its handler returns; SIGCONT resumes it")
		retries    = flag.Int("retries", 0, "job.Options.Retries: how many times a failed run of a tick is tried again, across the cluster")
		nodeTO     = flag.Duration("node-timeout", 0, "per-node request timeout (default: the lock client's, TTL/50)")
		duration   = flag.Duration("duration", 10*time.Second, "how long to run before stopping")
		grace      = flag.Duration("grace", 5*time.Second, "how long Stop lets running jobs finish")
		verbose    = flag.Bool("v", false, "log at debug level to stderr")
		burst      = flag.Int("burst", 0, "how many Forbid jobs burst-000… to add on -burst-spec")
		burstSpec  = flag.String("burst-spec", "*/10 * * * * *", "the spec of every -burst job")
		burstWork  = flag.Duration("burst-work", 10*time.Millisecond, "how long each run of a -burst job works (at least)")
		burstMax   = flag.Duration("burst-work-max", 0, "if above -burst-work, each run of a -burst job works a random time up to this")
	)
	flag.Parse()
	if *nodes == "" || *ledger == "" {
		return errors.New("-nodes and -ledger are required")
	}
	if *fenced != "" && *fencedPG != "" {
		return errors.New("-fenced and -fenced-postgres name two fenced stores: give one")
	}
	cfg := config{ledgerKey: *ledgerKey, fenced: *fenced, fencedPG: *fencedPG, work: *work, workMax: max(*workMax, *work), fail: *fail, freeze: new(atomic.Bool)}
	cfg.freeze.Store(*freeze)

	var lockNodes []redlock.Node
	for _, addr := range strings.Split(*nodes, ",") {
		rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
		defer rc.Close()
		lockNodes = append(lockNodes, rc)
	}
	var lockOpts []redlock.Option
	if *nodeTO > 0 {
		lockOpts = append(lockOpts, redlock.WithNodeTimeout(*nodeTO))
	}
	if *maxTTL > 0 {
		lockOpts = append(lockOpts, redlock.WithMaxTTL(*maxTTL))
	}
	locks, err := redlock.New(lockNodes, lockOpts...)
	if err != nil {
		return err
	}
	defer locks.Close()
	led := redis.NewClient(&redis.Options{Addr: *ledger})
	defer led.Close()

	logger := slog.New(slog.DiscardHandler)
	if *verbose {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	clock := clocktest.NewShifted(*offset)
	opts := []scheduler.Option{
		scheduler.WithClock(clock),
		scheduler.WithLogger(logger),
		scheduler.WithMiddleware(recordOutcomes(led, cfg.ledgerKey+":outcomes")),
	}
	if *replica != "" {
		opts = append(opts, scheduler.WithReplica(*replica))
	}
	s, err := scheduler.New(locks, opts...)
	if err != nil {
		return err
	}
	for _, j := range strings.Split(*jobs, ",") {
		name, overlap, _ := strings.Cut(j, ":")
		o := job.Forbid
		switch overlap {
		case "", "forbid":
		case "allow":
			o = job.Allow
		case "replace":
			o = job.Replace
		default:
			return fmt.Errorf("-job %q: overlap %q is unknown, use forbid, allow or replace", j, overlap)
		}
		jcfg := cfg
		if o == job.Replace && *replWork > 0 {
			jcfg.work, jcfg.workMax = *replWork, *replWork
		}
		handler := jcfg.handler(led, o != job.Allow)
		if err := s.Add(job.Job{Name: name, Spec: *spec, Handler: handler, Options: job.Options{LockTTL: *ttl, CatchUp: *catchUp, Overlap: o, Retries: *retries}}); err != nil {
			return err
		}
	}
	bcfg := cfg
	bcfg.work, bcfg.workMax = *burstWork, max(*burstMax, *burstWork)
	for i := range *burst {
		j := job.Job{Name: fmt.Sprintf("burst-%03d", i), Spec: *burstSpec, Handler: bcfg.handler(led, true),
			Options: job.Options{LockTTL: *ttl, Overlap: job.Forbid, Retries: *retries}}
		if err := s.Add(j); err != nil {
			return err
		}
	}
	if err := s.Start(); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	usr := make(chan os.Signal, 2)
	signal.Notify(usr, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(usr)
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-usr:
				cfg.freeze.Store(sig == syscall.SIGUSR1)
			}
		}
	})
	if *offsetFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		defer signal.Stop(hup)
		wg.Go(func() { followOffset(ctx, hup, *offsetFile, clock, logger) })
	}
	t := time.NewTimer(*duration)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	stop()
	began := time.Now()
	err = stopWithin(s, *grace, logger)
	rec := fmt.Sprintf("%s|%d", *replica, began.UnixNano())
	return errors.Join(err, led.RPush(context.Background(), cfg.ledgerKey+":stops", rec).Err())
}

// stopWithin stops s, its runs cancelled after grace. Runs that Stop left still ending (see
// schedseam.RunsLeft) get another grace to release their locks and write their records, as
// the daemon gives them: the worker exits cleanly once nothing of its own is under way, and
// logs what the first Stop said.
func stopWithin(s *scheduler.Scheduler, grace time.Duration, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.Stop(ctx)
	if !schedseam.RunsLeft(err) {
		return err
	}
	logger.Warn("waiting for the runs that Stop left", "err", err)
	ctx, cancel = context.WithTimeout(context.Background(), grace)
	defer cancel()
	return s.Stop(ctx)
}

// stopSelf stops this process with SIGSTOP, and returns only once it was continued (SIGCONT).
// The signal is sent to the calling thread (tgkill), which takes it on its way out of the system
// call, so no code of the caller runs while the process is meant to be stopped. A signal to the
// process (kill(getpid(), SIGSTOP)) is taken by whichever thread the kernel picks — the main
// thread when it can — and the caller's thread runs on until that one gets a CPU: on a loaded
// machine, long enough to return from the handler and mark the tick done before the process
// stopped. The thread is locked so that both system calls name the same one.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_ = syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

// followOffset steps clock to the offset in file on every SIGHUP until ctx ends.
func followOffset(ctx context.Context, hup <-chan os.Signal, file string, clock *clocktest.Shifted, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		data, err := os.ReadFile(file)
		if err == nil {
			var d time.Duration
			if d, err = time.ParseDuration(strings.TrimSpace(string(data))); err == nil {
				clock.Set(d)
				continue
			}
		}
		logger.Error("testworker: reading clock offset", "file", file, "err", err)
	}
}

// recordOutcomes is middleware that logs each tick's outcome on this replica to key.
func recordOutcomes(led *redis.Client, key string) middleware.Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			fired := time.Now()
			err := next(ctx)
			r, _ := job.RunFrom(ctx)
			rec := fmt.Sprintf("%s|%d|%s|%s|%d|%d", r.Job, r.Tick.UnixMilli(), r.Replica, middleware.Outcome(err), fired.UnixNano(), time.Now().UnixNano())
			if lerr := led.RPush(context.WithoutCancel(ctx), key, rec).Err(); lerr != nil {
				return errors.Join(err, lerr)
			}
			return err
		}
	}
}

// handler returns the job's handler: work, write to the fenced store if asked, log the run.
func (cfg config) handler(led *redis.Client, fenced bool) job.Handler {
	return func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		start := time.Now()
		bg := context.WithoutCancel(ctx)
		head := fmt.Sprintf("%s|%d|%s|%d", r.Job, r.Tick.UnixMilli(), r.Replica, r.FencingToken)
		if err := led.RPush(bg, cfg.ledgerKey+":started", fmt.Sprintf("%s|%d", head, start.UnixNano())).Err(); err != nil {
			return err
		}
		work := cfg.work
		if cfg.workMax > cfg.work {
			work += rand.N(cfg.workMax - cfg.work)
		}
		t := time.NewTimer(work)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		end := time.Now()
		deadline, _ := ctx.Deadline()
		cancelled, cause := 0, ""
		if ctx.Err() != nil {
			cancelled, cause = 1, context.Cause(ctx).Error()
		}
		write, writeAt, liveAfter := "", int64(0), 0
		if fenced && (cfg.fenced != "" || cfg.fencedPG != "") {
			at := time.Now()
			ok, err := cfg.write(bg, led, r, at)
			if err != nil {
				return err
			}
			write, writeAt = fencedstore.Answer(ok), at.UnixNano()
			if ctx.Err() == nil {
				liveAfter = 1
			}
		}
		rec := fmt.Sprintf("%s|%d|%d|%d|%d|%s|%s|%d|%d", head, start.UnixNano(), end.UnixNano(), cancelled, deadline.UnixNano(),
			strings.ReplaceAll(cause, "|", "/"), write, writeAt, liveAfter)
		if err := led.RPush(bg, cfg.ledgerKey, rec).Err(); err != nil {
			return err
		}
		if cancelled == 1 {
			return context.Cause(ctx)
		}
		if cfg.freeze.CompareAndSwap(true, false) {
			stopSelf()
		}
		if cfg.fail {
			return errors.New("testworker: failing as asked (-fail)")
		}
		return nil
	}
}

// write writes run r's token to the fenced store at time at, and reports whether the store
// accepted it.
func (cfg config) write(ctx context.Context, led *redis.Client, r *job.Run, at time.Time) (bool, error) {
	if cfg.fencedPG == "" {
		entry := fmt.Sprintf("%d|%s|%d|%d", r.FencingToken, r.Replica, r.Tick.UnixMilli(), at.UnixNano())
		ok, err := fencedstore.Script.Run(ctx, led, fencedstore.Keys(cfg.fenced, r.Job), r.FencingToken, entry).Int()
		return ok == 1, err
	}
	// A connection per write: runs of two jobs may write at once, and a write is rare.
	conn, err := pgx.Connect(ctx, cfg.fencedPG)
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	return fencedstore.WritePostgres(ctx, conn, r.Job, r.FencingToken, r.Replica, r.Tick, at)
}
