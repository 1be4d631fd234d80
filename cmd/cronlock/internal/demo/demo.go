package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/internal/ctxsleep"
	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// Config is the demo's command line (Parse).
type Config struct {
	Nodes    []string      // host:port of real Redis nodes; none: three embedded nodes
	Replicas int           // 2 to 9
	Duration time.Duration // how long the demo runs
	Every    time.Duration // the job's period
	Work     time.Duration // how long one run works
	TTL      time.Duration // the tick lock's TTL
	Verbose  bool          // the scheduler's log lines go to stderr, not to a file
}

// Run runs the demo on cfg, writing its table and annotations to stdout. The scheduler's log
// lines go to stderr with -v; otherwise to a temporary file, whose path Run prints last.
func Run(ctx context.Context, cfg Config, stdout, stderr io.Writer) error {
	logOut := stderr
	if !cfg.Verbose {
		f, err := os.CreateTemp("", "cronlock-demo-*.log")
		if err != nil {
			return fmt.Errorf("the demo's log file: %w (or use -v to log to stderr)", err)
		}
		defer func() {
			_ = f.Close()
			fmt.Fprintf(stdout, "the scheduler's log lines: %s\n", f.Name())
		}()
		logOut = f
	}
	addrs := cfg.Nodes
	if len(addrs) == 0 {
		embedded, stop, err := startEmbeddedNodes(3)
		if err != nil {
			return err
		}
		defer stop()
		addrs = embedded
		fmt.Fprintf(stdout, "nodes: 3 embedded Redis-protocol nodes (miniredis) at %s\n", strings.Join(addrs, ", "))
	} else {
		fmt.Fprintf(stdout, "nodes: %s\n", strings.Join(addrs, ", "))
	}
	prefix := "cronlock-demo-" + randomHex(4)
	if len(cfg.Nodes) > 0 {
		// The replicas reach the nodes through the demo's proxies: check the user's addresses
		// first, so that an error names them.
		if err := pingNodes(ctx, addrs); err != nil {
			return err
		}
		defer removeKeys(addrs, prefix, stdout)
	}
	fmt.Fprintf(stdout, "job: %q every %v (keys under %s), %d replicas, lock TTL %v, for %v\n\n",
		"report", cfg.Every, prefix, cfg.Replicas, cfg.TTL, cfg.Duration)

	d := &demoRun{cfg: cfg, out: stdout, log: slog.New(slog.NewTextHandler(logOut, nil)), ticks: map[time.Time]*tickRow{}}
	var replicas []*replica
	defer func() {
		for _, r := range replicas {
			r.close()
		}
	}()
	for i := range cfg.Replicas {
		r, err := d.newReplica(fmt.Sprintf("r%d", i+1), addrs, prefix)
		if err != nil {
			return err
		}
		replicas = append(replicas, r)
	}
	d.replicas = replicas
	// Every replica's lock client uses the demo's own boot key, whose quarantine it may end:
	// no lock of the demo's can have been forgotten before it started.
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := replicas[0].locks.EndQuarantine(qctx)
	cancel()
	if err != nil {
		return fmt.Errorf("lock nodes unreachable: %w", err)
	}

	d.cutAt = time.Now().Add(cfg.Duration / 2)
	for _, r := range replicas {
		if err := r.sched.Start(); err != nil {
			return err
		}
	}
	printer := d.startPrinter()
	select {
	case <-ctx.Done():
		fmt.Fprintln(stdout, "interrupted: stopping")
	case <-time.After(cfg.Duration):
		d.control(ctx)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 2*cfg.TTL+time.Second)
	defer cancel()
	var stopErrs []error
	for _, r := range replicas {
		stopErrs = append(stopErrs, r.sched.Stop(stopCtx))
	}
	printer()
	if err := errors.Join(stopErrs...); err != nil {
		return err
	}
	return d.summary()
}

// pingNodes checks that every node answers, naming the address of each that does not.
func pingNodes(ctx context.Context, addrs []string) error {
	var errs []error
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		if err := c.Ping(pctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("lock node %s: %w", a, err))
		}
		cancel()
		_ = c.Close()
	}
	return errors.Join(errs...)
}

// removeKeys deletes what the demo wrote on the user's nodes: the keys under {prefix:...},
// {prefix}:... (the queue of manual runs) and prefix:... (the boot key), and says so.
func removeKeys(addrs []string, prefix string, out io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	removed := 0
	var errs []error
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		for _, pattern := range []string{layout.JobMatch(prefix, ""), layout.PrefixMatch(prefix), prefix + ":*"} {
			it := c.Scan(ctx, 0, pattern, 100).Iterator()
			for it.Next(ctx) {
				n, err := c.Del(ctx, it.Val()).Result()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", a, err))
					break
				}
				removed += int(n)
			}
			if err := it.Err(); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", a, err))
			}
		}
		_ = c.Close()
	}
	fmt.Fprintf(out, "removed the demo's %d keys ({%s:*}, {%s}:triggers and %s:boot) from the nodes\n", removed, prefix, prefix, prefix)
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(out, "could not remove every key: %v\n", err)
	}
}

// startEmbeddedNodes starts n miniredis servers whose TTLs follow the real clock.
func startEmbeddedNodes(n int) ([]string, func(), error) {
	var addrs []string
	var servers []*miniredis.Miniredis
	stop := func() {
		for _, m := range servers {
			m.Close()
		}
	}
	for range n {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			stop()
			return nil, nil, fmt.Errorf("embedded node: %w", err)
		}
		m.ClockTTL(true)
		servers = append(servers, m)
		addrs = append(addrs, m.Addr())
	}
	return addrs, stop, nil
}

// replica is one scheduler with its own connections to the nodes, each through a proxy that
// can cut it off.
type replica struct {
	name    string
	proxies []*faultproxy.Proxy
	clients []*redis.Client
	locks   *redlock.Client
	sched   *scheduler.Scheduler
}

func (d *demoRun) newReplica(name string, addrs []string, prefix string) (*replica, error) {
	r := &replica{name: name}
	var nodes []redlock.Node
	for _, a := range addrs {
		p, err := faultproxy.New(a)
		if err != nil {
			r.close()
			return nil, err
		}
		r.proxies = append(r.proxies, p)
		c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
		r.clients = append(r.clients, c)
		nodes = append(nodes, c)
	}
	var err error
	// A node timeout independent of the TTL (redlock's default, TTL/50, is a few ms for the
	// demo's short TTLs), but under a quarter of it so that every --ttl leaves validity.
	r.locks, err = redlock.New(nodes, redlock.WithLabel(name), redlock.WithBootKey(prefix+":boot"),
		redlock.WithNodeTimeout(min(100*time.Millisecond, d.cfg.TTL/4)))
	if err != nil {
		r.close()
		return nil, err
	}
	r.sched, err = scheduler.New(r.locks, scheduler.WithReplica(name), scheduler.WithPrefix(prefix),
		scheduler.WithMiddleware(d.record(name)), scheduler.WithLogger(d.log))
	if err != nil {
		r.close()
		return nil, err
	}
	err = r.sched.Add(job.Job{
		Name:    "report",
		Spec:    fmt.Sprintf("@every %v", d.cfg.Every),
		Handler: d.work(r),
		Options: job.Options{LockTTL: d.cfg.TTL, RenewEvery: d.cfg.TTL / 3, Overlap: job.Allow},
	})
	if err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *replica) close() {
	if r.locks != nil {
		_ = r.locks.Close()
	}
	for _, c := range r.clients {
		_ = c.Close()
	}
	for _, p := range r.proxies {
		_ = p.Close()
	}
}

// cut blackholes the replica's connections to every node for d, then lets it reconnect.
func (r *replica) cut(ctx context.Context, d time.Duration) {
	for _, p := range r.proxies {
		p.Blackhole(true)
	}
	t := time.NewTimer(d)
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	for _, p := range r.proxies {
		p.Blackhole(false)
		p.ResetAll()
	}
}

// demoRun collects what every replica did at every tick.
type demoRun struct {
	cfg      Config
	out      io.Writer
	log      *slog.Logger // the schedulers'
	replicas []*replica
	cutAt    time.Time

	mu      sync.Mutex
	cutDone bool           // a cut began, or control forbade one
	cut     *replica       // the replica cut off, if any
	cutting sync.WaitGroup // the cut in progress
	ticks   map[time.Time]*tickRow
}

// safetyLimit bounds the demo's waits for an event (a row's outcomes, the manual run's record) in
// case it never comes; the waits end at the event, not at this limit.
const safetyLimit = 30 * time.Second

// tickRow is one tick as seen by all replicas.
type tickRow struct {
	tick     time.Time
	outcomes map[string]string // replica → outcome
	runs     []runInfo
	cancel   string // cause of a run's cancellation, if any
	trigger  string // the manual run's id; empty for a tick
	printed  bool
}

type runInfo struct {
	replica string
	token   uint64
	late    time.Duration
}

func (d *demoRun) row(tick time.Time) *tickRow {
	row := d.ticks[tick]
	if row == nil {
		row = &tickRow{tick: tick, outcomes: map[string]string{}}
		d.ticks[tick] = row
	}
	return row
}

// record is the outermost middleware of a replica: it notes the tick's outcome there.
func (d *demoRun) record(name string) func(job.Handler) job.Handler {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			run, _ := job.RunFrom(ctx)
			err := next(ctx)
			d.mu.Lock()
			row := d.row(run.Tick)
			row.outcomes[name], row.trigger = middleware.Outcome(err), run.Trigger
			d.mu.Unlock()
			return err
		}
	}
}

// work is the job: it notes the run, works for a while, and — once, halfway through the
// demo — cuts its own replica off from the nodes while it runs.
func (d *demoRun) work(r *replica) job.Handler {
	return func(ctx context.Context) error {
		run, _ := job.RunFrom(ctx)
		d.mu.Lock()
		row := d.row(run.Tick)
		row.runs = append(row.runs, runInfo{replica: r.name, token: run.FencingToken, late: time.Since(run.Tick)})
		cut := !d.cutDone && time.Now().After(d.cutAt)
		if cut {
			d.cutDone, d.cut = true, r
			d.cutting.Add(1)
		}
		d.mu.Unlock()
		if !cut {
			t := time.NewTimer(d.cfg.Work)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-t.C:
				return nil
			}
		}
		d.mu.Lock() // the printer writes to d.out under d.mu too
		fmt.Fprintf(d.out, "           ✂ %s is cut off from every node while it runs tick %s\n", r.name, run.Tick.Format("15:04:05.000"))
		d.mu.Unlock()
		go func() {
			defer d.cutting.Done()
			r.cut(context.Background(), 3*d.cfg.TTL)
		}()
		<-ctx.Done() // a job that would go on working, but watches its context
		cause := context.Cause(ctx)
		d.mu.Lock()
		row.cancel = fmt.Sprintf("%s's context cancelled %v after the tick: %v", r.name, time.Since(run.Tick).Round(time.Millisecond), cause)
		d.mu.Unlock()
		return cause
	}
}

// startPrinter prints each tick's row once every replica reported it (or a while has passed),
// and returns a func that prints what is left and stops it.
func (d *demoRun) startPrinter() func() {
	fmt.Fprintf(d.out, "%-12s  %-6s  %-20s  %-9s  %s\n", "tick", "ran", "fencing token", "late", "others")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				d.flush(true)
				return
			case <-t.C:
				d.flush(false)
			}
		}
	}()
	return func() {
		d.cutting.Wait()
		close(stop)
		<-done
	}
}

func (d *demoRun) flush(all bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	var ready []*tickRow
	for _, row := range d.ticks {
		complete := len(row.outcomes) == len(d.replicas) || time.Since(row.tick) > safetyLimit
		if !row.printed && (all || complete) {
			ready = append(ready, row)
		}
	}
	slices.SortFunc(ready, func(a, b *tickRow) int { return a.tick.Compare(b.tick) })
	for _, row := range ready {
		row.printed = true
		ran, token, late := "-", "-", "-"
		if len(row.runs) > 0 {
			var names []string
			for _, r := range row.runs {
				names = append(names, r.replica)
			}
			ran = strings.Join(names, "+")
			token = fmt.Sprint(row.runs[len(row.runs)-1].token)
			late = row.runs[len(row.runs)-1].late.Round(100 * time.Microsecond).String()
		}
		var others []string
		for _, r := range d.replicas {
			if o, ok := row.outcomes[r.name]; ok && o != outcome.Ran {
				others = append(others, r.name+" "+o)
			}
		}
		tick := row.tick.Format("15:04:05.000")
		if row.trigger != "" {
			tick = "manual"
		}
		fmt.Fprintf(d.out, "%-12s  %-6s  %-20s  %-9s  %s\n", tick, ran, token, late, strings.Join(others, ", "))
		if row.cancel != "" {
			fmt.Fprintf(d.out, "           ↳ %s\n", row.cancel)
		}
	}
}

// summary prints the totals and fails if a tick ran twice or tokens went backwards.
func (d *demoRun) summary() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	rows := make([]*tickRow, 0, len(d.ticks))
	for _, row := range d.ticks {
		rows = append(rows, row)
	}
	slices.SortFunc(rows, func(a, b *tickRow) int { return a.tick.Compare(b.tick) })
	var runs, dups, missed, cancelled, paused, manual int
	var last uint64
	backwards := false
	for _, row := range rows {
		ran := 0
		for _, o := range row.outcomes {
			if o == outcome.Ran {
				ran++
			}
		}
		runs += len(row.runs)
		if row.trigger != "" {
			manual++
		}
		switch {
		case ran > 1:
			dups++
		case row.cancel != "":
			cancelled++
		case ran == 0 && len(row.runs) == 0 && slices.Contains(slices.Collect(maps.Values(row.outcomes)), outcome.SkippedPaused):
			paused++
		case ran == 0 && len(row.runs) == 0:
			missed++
		}
		if row.trigger != "" {
			// A manual run is filed under the instant it was asked, but takes the lock when
			// a replica sees the request — possibly after the next tick's run: its token
			// follows that order, not the row's.
			continue
		}
		for _, r := range row.runs {
			if r.token <= last {
				backwards = true
			}
			last = r.token
		}
	}
	fmt.Fprintf(d.out, "\nsummary: %d ticks and %d manual runs, %d runs, %d duplicates, %d missed, %d skipped while paused, %d cut short by a lost lease; fencing tokens %s\n",
		len(rows)-manual, manual, runs, dups, missed, paused, cancelled, map[bool]string{false: "strictly increasing", true: "NOT increasing"}[backwards])
	if dups > 0 || backwards {
		return errors.New("the demo saw a tick run twice or a token go backwards: please report this")
	}
	return nil
}

// control ends the demo with the operator's controls: a pause from one replica that every
// replica honours, a resume from another, a manual run, and the history — all sent through
// replicas that were never cut off, once the cut has ended and no other can begin.
func (d *demoRun) control(ctx context.Context) {
	d.mu.Lock()
	d.cutDone = true // no cut begins after this
	cut := d.cut
	d.mu.Unlock()
	d.cutting.Wait()
	var uncut []*replica
	for _, r := range d.replicas {
		if r != cut {
			uncut = append(uncut, r)
		}
	}
	r := func(i int) *replica { return uncut[i%len(uncut)] }
	say := func(format string, args ...any) {
		d.flush(false)
		d.mu.Lock()
		defer d.mu.Unlock()
		fmt.Fprintf(d.out, "           ⏵ "+format+"\n", args...)
	}
	if err := r(0).sched.Control().Pause(ctx, "report", "paused by the demo"); err != nil {
		say("pause failed: %v", err)
		return
	}
	say("%s pauses %q on every replica (cronlock pause): its ticks are skipped_paused", r(0).name, "report")
	if !ctxsleep.Sleep(ctx, 2*d.cfg.Every+d.cfg.Every/2) {
		return
	}
	if err := r(1).sched.Control().Resume(ctx, "report"); err != nil {
		say("resume failed: %v", err)
		return
	}
	say("%s resumes it (cronlock resume)", r(1).name)
	id, err := r(2).sched.Control().Trigger(ctx, "report")
	if err != nil {
		say("trigger failed: %v", err)
		return
	}
	say("%s asks for a manual run now (cronlock trigger): %s", r(2).name, id)
	// The history shows the manual run once the scheduler recorded it, after the run's
	// outcome: wait for the record itself.
	deadline := time.Now().Add(safetyLimit)
	h, err := r(0).sched.Control().History(ctx, "report", 6)
	for !slices.ContainsFunc(h, func(rec scheduler.Record) bool { return rec.Trigger == id }) {
		if time.Now().After(deadline) {
			say("the manual run is not in the history after %v", safetyLimit)
			break
		}
		if !ctxsleep.Sleep(ctx, 20*time.Millisecond) {
			return
		}
		h, err = r(0).sched.Control().History(ctx, "report", 6)
	}
	say("the last runs, from the lock nodes (cronlock history report):")
	d.mu.Lock()
	defer d.mu.Unlock()
	if err != nil && h == nil {
		fmt.Fprintf(d.out, "history: %v\n", err)
		return
	}
	history.Print(d.out, h)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
