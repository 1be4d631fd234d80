//go:build linux

package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/fencedstore"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/pgtest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// The jobs every worker runs (daemon workers all but the Replace job), and with the Burst
// class the burst set (burstJobs).
var jobs = []JobSpec{{Name: "forbid", Forbid: true}, {Name: "allow"}, {Name: "replace", Replace: true}}

// burstJobs returns the burst set of n jobs: Forbid jobs, each due at every multiple of
// settings.burstEvery.
func burstJobs(n int) []JobSpec {
	out := make([]JobSpec, n)
	for i := range out {
		out[i] = JobSpec{Name: fmt.Sprintf("burst-%03d", i), Forbid: true, Burst: true}
	}
	return out
}

const (
	ledgerKey = "ledger"
	fencedKey = "fenced"
	bootKey   = layout.BootKey
)

type harness struct {
	cfg     Config
	s       settings
	jobs    []JobSpec // jobs, and the burst set if the Burst class is on
	burst   int       // the burst set's size: 0 without the Burst class
	tl      *Timeline
	ledger  *redistest.Server
	pg      *pgtest.Server // the fenced store with PostgresStore, else nil
	nodes   []*redistest.Server
	proxies [][]*faultproxy.Proxy // [worker][node]
	workers []*worker
	rng     *rand.Rand
	watch   *runWatch // nil without daemon workers
	probe   *stallProbe
	// daemonNodeTimeout is the daemon workers' node timeout: the lock client's default for
	// their TTL (the daemon has no setting for it).
	daemonNodeTimeout time.Duration
	// problems are the harness's findings during the fault phase (a worker that did not exit
	// cleanly when an episode stopped it), added to the report's.
	problems []string
}

// Run runs one chaos run: it starts the nodes, proxies and workers, applies the seeded fault
// schedule for cfg.Duration, heals everything, lets the cluster settle, stops the workers and
// checks the ledger. Everything it started is stopped when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	s := defaults
	if cfg.Daemons < 0 || cfg.Daemons > s.workers {
		return nil, fmt.Errorf("%d daemon workers: give 0 to %d", cfg.Daemons, s.workers)
	}
	s.daemons = cfg.Daemons
	if cfg.Store == "" {
		cfg.Store = RedisStore
	}
	if _, err := ParseStore(string(cfg.Store)); err != nil {
		return nil, err
	}
	h := &harness{
		cfg: cfg, s: s, jobs: jobs,
		tl:  &Timeline{Nodes: s.nodes, Workers: s.workers, Quorum: s.quorum, Grace: s.grace},
		rng: rand.New(rand.NewPCG(cfg.Seed, 1)),
	}
	if slices.Contains(cfg.Faults, Burst) {
		if cfg.Burst <= 0 {
			return nil, fmt.Errorf("burst set of %d jobs: the burst class needs at least 1", cfg.Burst)
		}
		h.burst = cfg.Burst
		h.jobs = append(slices.Clone(jobs), burstJobs(cfg.Burst)...)
	}
	defer h.close()
	if err := h.start(ctx); err != nil {
		return nil, err
	}
	rep := &Report{Config: cfg, Episodes: map[Class]int{}}

	schedule := plan(cfg.Seed, cfg.Duration, cfg.Faults, s)
	from := time.Now()
	if h.burst > 0 {
		// The schedule puts the Burst episodes at multiples of burstEvery from its start.
		from = firstTick(from, s.burstEvery)
		if !sleepCtx(ctx, time.Until(from)) {
			return nil, ctx.Err()
		}
	}
	cfg.Logf("fault phase: %d episodes over %v", len(schedule), cfg.Duration)
	if err := h.apply(ctx, from, schedule); err != nil {
		return nil, err
	}
	if !sleepCtx(ctx, time.Until(from.Add(cfg.Duration))) {
		return nil, ctx.Err()
	}
	for _, e := range h.tl.Episodes {
		rep.Episodes[e.Class]++
	}
	cfg.Logf("healed; settling for %v", s.settle)
	if !sleepCtx(ctx, s.settle) {
		return nil, ctx.Err()
	}
	to := time.Now().Add(-2 * s.interval)
	recorded := time.Now()
	rep.Problems = append(rep.Problems, h.problems...)
	rep.Problems = append(rep.Problems, h.stopWorkers()...)
	rep.Problems = append(rep.Problems, h.leftLocks(ctx)...)
	if h.watch != nil {
		rep.Problems = append(rep.Problems, h.watch.stop(s.ttl)...)
	}
	for _, e := range h.probe.stop() {
		if h.tl.addStall(e) {
			rep.Stalls++
			rep.Stalled += e.to.Sub(e.from)
		}
	}
	h.probe = nil

	d, err := readData(ctx, h.ledger.Client(), ledgerKey, fencedKey, h.jobNames())
	if err != nil {
		return nil, fmt.Errorf("reading the ledger: %w", err)
	}
	if h.pg != nil {
		if d.Accepted, d.Rejected, err = readPostgresWrites(ctx, h.pg.DSN, h.jobNames()); err != nil {
			return nil, fmt.Errorf("reading the Postgres fenced store: %w", err)
		}
	}
	if d.History, err = h.history(ctx); err != nil {
		return nil, fmt.Errorf("reading the run history: %w", err)
	}
	if d.InFlight, err = h.inFlight(ctx); err != nil {
		return nil, fmt.Errorf("reading the runs in flight: %w", err)
	}
	// The ledger as read, to study a kept run directory (-chaos.keep) after the fact.
	if err := writeJSON(filepath.Join(h.cfg.Dir, "ledger.json"), d); err != nil {
		return nil, err
	}
	replicas, daemons := map[string]int{}, map[string]bool{}
	for i, w := range h.workers {
		replicas[w.name] = i
		if w.daemon {
			daemons[w.name] = true
			l, err := w.readLog()
			if err != nil {
				return nil, fmt.Errorf("reading the log of %s: %w", w.name, err)
			}
			d.Outcomes = append(d.Outcomes, l.outcomes...)
			d.Stops = append(d.Stops, l.stops...)
			for i := range d.Runs {
				run := &d.Runs[i]
				if run.Finished && !run.Cancelled && l.failed[runID{run.Job, run.Replica, run.Tick.UnixMilli(), run.Token}] {
					run.Cancelled, run.Cause = true, StoppedCause
				}
			}
		}
	}
	for _, run := range d.Runs {
		if daemons[run.Replica] {
			rep.DaemonRuns++
			if run.Cause == StoppedCause {
				rep.DaemonRunsStopped++
			}
		}
	}
	rep.Result = Check(Params{Jobs: h.jobs, Interval: s.interval, BurstEvery: s.burstEvery, From: from, To: to, TTL: s.ttl, Replicas: replicas, Daemons: daemons, Retries: s.retries,
		// A dead run's lock expires, then a live replica finds it gone at two looks in a row.
		Recorded: recorded, RescueBound: s.ttl + 2*scheddefault.RescueEvery + s.interval, HistorySize: scheddefault.HistorySize}, h.tl, d)
	return rep, nil
}

// history reads every job's run history from the lock nodes, as the workers (which keep the
// default history size) left it.
func (h *harness) history(ctx context.Context) ([]scheduler.Record, error) {
	var nodes []redlock.Node
	for _, n := range h.nodes {
		nodes = append(nodes, n.Client())
	}
	lc, err := redlock.New(nodes, redlock.WithMaxTTL(h.s.maxTTL))
	if err != nil {
		return nil, err
	}
	defer lc.Close()
	ctl, err := scheduler.NewControl(lc)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out []scheduler.Record
	for _, j := range h.jobs {
		recs, err := ctl.History(ctx, j.Name, scheddefault.HistorySize)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", j.Name, err)
		}
		out = append(out, recs...)
	}
	return out, nil
}

// inFlight reads, for every job, each node's record of the job's runs in flight (see
// Data.InFlight); a node that does not answer holds nothing.
func (h *harness) inFlight(ctx context.Context) (map[string][]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out := map[string][]string{}
	for _, j := range h.jobs {
		for _, n := range h.nodes {
			kv, err := n.Client().HGetAll(ctx, layout.RunningKey(middleware.DefaultPrefix, j.Name)).Result()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", j.Name, err)
			}
			var b strings.Builder
			for k, v := range kv {
				fmt.Fprintf(&b, "%s=%s\n", k, v)
			}
			out[j.Name] = append(out[j.Name], b.String())
		}
	}
	return out, nil
}

func (h *harness) jobNames() []string {
	var out []string
	for _, j := range h.jobs {
		out = append(out, j.Name)
	}
	return out
}

// start starts the ledger node, the lock nodes (their quarantine ended), a proxy per worker
// and node, and the workers, and waits for the warm-up.
func (h *harness) start(ctx context.Context) error {
	var err error
	if h.ledger, err = redistest.New(redistest.Config{Dir: filepath.Join(h.cfg.Dir, "ledger")}); err != nil {
		return err
	}
	for i := range h.s.nodes {
		n, err := redistest.New(redistest.Config{
			Dir:       filepath.Join(h.cfg.Dir, fmt.Sprintf("node%d", i)),
			AOF:       i < h.s.aofNodes,
			LiveClock: true,
			Args:      []string{"--maxmemory-policy", "noeviction"},
		})
		if err != nil {
			return err
		}
		h.nodes = append(h.nodes, n)
	}
	if err := h.endQuarantine(ctx); err != nil {
		return err
	}
	if h.cfg.Store == PostgresStore {
		if err := h.startPostgres(ctx); err != nil {
			return err
		}
	}
	var addrs []string
	for _, n := range h.nodes {
		addrs = append(addrs, n.Addr())
	}
	// Half the node timeout, as a latency fault counts as a cut (see begin).
	h.probe = startStallProbe(addrs, h.s.nodeTimeout/2)
	if h.s.daemons > 0 {
		if err := os.Mkdir(h.runsDir(), 0o755); err != nil {
			return err
		}
		h.watch = startRunWatch(h.ledger.Addr(), h.runsDir())
	}
	h.proxies = make([][]*faultproxy.Proxy, h.s.workers)
	for w := range h.s.workers {
		for _, n := range h.nodes {
			p, err := faultproxy.New(n.Addr())
			if err != nil {
				return err
			}
			h.proxies[w] = append(h.proxies[w], p)
		}
	}
	for i := range h.s.workers {
		w := &worker{h: h, idx: i, name: fmt.Sprintf("w%d", i), daemon: i >= h.s.workers-h.s.daemons}
		if w.daemon {
			w.name = fmt.Sprintf("d%d", i)
		}
		h.workers = append(h.workers, w)
		var err error
		if w.daemon {
			w.config, err = h.writeDaemonConfig(w)
		} else {
			err = w.setOffset(h.startOffset(i))
		}
		if err != nil {
			return err
		}
		if err := w.start(); err != nil {
			return err
		}
	}
	h.cfg.Logf("%d nodes, %d workers (%d of them daemons) up; warming up for %v", h.s.nodes, h.s.workers, h.s.daemons, h.s.warmup)
	if !sleepCtx(ctx, h.s.warmup) {
		return ctx.Err()
	}
	return nil
}

// startOffset draws testworker i's first clock offset, within ±maxOffset. The replica whose
// clock is ahead takes nearly every tick, and a daemon worker's clock cannot be offset (it
// is at 0): with daemon workers, the offsets are within [−maxOffset, 0] and the first
// testworker's is 0, so that the daemons race one testworker at every tick (the winner
// varies) instead of losing every race to the testworkers ahead of them.
func (h *harness) startOffset(i int) time.Duration {
	d := time.Duration(h.rng.Int64N(int64(2*h.s.maxOffset))) - h.s.maxOffset
	switch {
	case h.s.daemons == 0:
		return d
	case i == 0:
		return 0
	}
	return -d.Abs()
}

// startPostgres starts the Postgres fenced store and creates its tables.
func (h *harness) startPostgres(ctx context.Context) error {
	var err error
	if h.pg, err = pgtest.New(); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, h.pg.DSN)
	if err != nil {
		return fmt.Errorf("connecting to the Postgres fenced store: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, fencedstore.PostgresSchema); err != nil {
		return fmt.Errorf("creating the Postgres fenced store's tables: %w", err)
	}
	return nil
}

// endQuarantine marks the new nodes as booted, as an operator does on first deployment.
func (h *harness) endQuarantine(ctx context.Context) error {
	var nodes []redlock.Node
	for _, n := range h.nodes {
		nodes = append(nodes, n.Client())
	}
	lc, err := redlock.New(nodes, redlock.WithMaxTTL(h.s.maxTTL))
	if err != nil {
		return err
	}
	defer lc.Close()
	h.daemonNodeTimeout = lockseam.NodeTimeout(lc, h.s.ttl)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return lc.EndQuarantine(ctx)
}

// quarantine starts the quarantine of node n, which came back empty, with one lock attempt
// (as the workers' next attempt would, a moment later), and returns when it ends: the time in
// the node's boot marker. A node that takes the lock instead is an error.
func (h *harness) quarantine(n int) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc := h.nodes[n].Client()
	lc, err := redlock.New([]redlock.Node{rc}, redlock.WithMaxTTL(h.s.maxTTL), redlock.WithNodeTimeout(time.Second))
	if err != nil {
		return time.Time{}, err
	}
	defer lc.Close()
	l, err := lc.TryAcquire(ctx, "chaos:probe", h.s.ttl)
	if err == nil {
		_ = l.Release(ctx)
		return time.Time{}, fmt.Errorf("node %d came back empty and took a lock: no quarantine", n)
	}
	if !errors.Is(err, redlock.ErrQuorumUnavailable) {
		return time.Time{}, fmt.Errorf("node %d: probing its quarantine: %w", n, err)
	}
	until, err := rc.Get(ctx, bootKey).Int64()
	if err != nil {
		return time.Time{}, fmt.Errorf("node %d: reading its boot marker: %w", n, err)
	}
	return time.UnixMicro(until), nil
}

// apply runs the schedule from start: each episode begins and ends at its planned time (or as
// soon as the actions before it are done), recording what it did in the timeline.
func (h *harness) apply(ctx context.Context, start time.Time, schedule []planned) error {
	type action struct {
		at    time.Duration
		begin bool
		i     int
	}
	var actions []action
	for i, e := range schedule {
		actions = append(actions, action{e.at, true, i}, action{e.end(), false, i})
	}
	slices.SortStableFunc(actions, func(a, b action) int { return int(a.at - b.at) })
	undo := make([]func() error, len(schedule))
	episode := make([]int, len(schedule))
	for _, a := range actions {
		if !sleepCtx(ctx, time.Until(start.Add(a.at))) {
			return ctx.Err()
		}
		e := schedule[a.i]
		if a.begin {
			// From before the fault is applied: some take a moment to (a node's clock step
			// takes up to a second to show), and the fault may act from the first step on.
			began := time.Now()
			what, u, err := h.begin(e)
			if err != nil {
				return fmt.Errorf("%v: %w", e, err)
			}
			undo[a.i] = u
			episode[a.i] = len(h.tl.Episodes)
			h.tl.Episodes = append(h.tl.Episodes, Episode{Class: e.class, What: what, Start: began})
			h.cfg.Logf("+%v (%s) %s %s", time.Since(start).Truncate(time.Millisecond), fmtTime(time.Now()), e.class, what)
			continue
		}
		if err := undo[a.i](); err != nil {
			return fmt.Errorf("ending %v: %w", e, err)
		}
		h.tl.Episodes[episode[a.i]].End = time.Now()
	}
	return nil
}

// cut records a linkCut effect for each (worker, node) pair and returns a func that ends them.
func (h *harness) cut(workers, nodes []int) func() {
	var idx []int
	for _, w := range orAll(workers) {
		for _, n := range orAll(nodes) {
			idx = append(idx, len(h.tl.effects))
			h.tl.add(effect{kind: linkCut, worker: w, node: n, from: time.Now()})
		}
	}
	return func() {
		for _, i := range idx {
			h.tl.effects[i].to = time.Now()
		}
	}
}

// orAll turns "no targets" into the wildcard -1.
func orAll(xs []int) []int {
	if len(xs) == 0 {
		return []int{-1}
	}
	return xs
}

// links returns the proxies between the workers and nodes (empty: all).
func (h *harness) links(workers, nodes []int) []*faultproxy.Proxy {
	var out []*faultproxy.Proxy
	for w := range h.s.workers {
		for n := range h.s.nodes {
			if (len(workers) == 0 || slices.Contains(workers, w)) && (len(nodes) == 0 || slices.Contains(nodes, n)) {
				out = append(out, h.proxies[w][n])
			}
		}
	}
	return out
}

// begin starts episode e and returns what it hit and how to end it.
func (h *harness) begin(e planned) (string, func() error, error) {
	what, undo, err := h.inject(e)
	if e.class == Burst {
		what = fmt.Sprintf("%s %s", e.fault, what)
	}
	return what, undo, err
}

// inject starts episode e's fault (for a Burst episode, the fault it lands in the burst).
func (h *harness) inject(e planned) (string, func() error, error) {
	target := fmt.Sprintf("nodes %v workers %v", e.nodes, e.workers)
	switch e.fault {
	case NodeKill, MajorityKill:
		var downs []int // their effects
		for _, n := range e.nodes {
			if err := h.nodes[n].Kill(); err != nil {
				return "", nil, err
			}
			downs = append(downs, len(h.tl.effects))
			h.tl.add(effect{kind: nodeDown, worker: -1, node: n, from: time.Now()})
		}
		aof := 0
		for _, n := range e.nodes {
			if n < h.s.aofNodes {
				aof++
			}
		}
		return fmt.Sprintf("nodes %v (%d with AOF, %d come back empty)", e.nodes, aof, len(e.nodes)-aof), func() error {
			for j, n := range e.nodes {
				h.tl.effects[downs[j]].upFrom = time.Now()
				if err := h.nodes[n].Restart(); err != nil {
					return err
				}
				h.tl.effects[downs[j]].to = time.Now()
				if n >= h.s.aofNodes {
					restarted := time.Now()
					until, err := h.quarantine(n)
					if err != nil {
						return err
					}
					h.tl.add(effect{kind: nodeQuarantined, worker: -1, node: n, from: restarted, to: until})
				}
			}
			return nil
		}, nil
	case Latency:
		for _, p := range h.links(e.workers, e.nodes) {
			p.SetLatency(e.latency)
		}
		// A round trip of half the node timeout counts as a cut: the proxies and a loaded CPU
		// add their own delay. (The testworkers' bands are far from it; the daemon's node
		// timeout is within the lower band.)
		var slow []int
		for _, w := range h.workers {
			if (len(e.workers) == 0 || slices.Contains(e.workers, w.idx)) && 4*e.latency >= w.nodeTimeout() {
				slow = append(slow, w.idx)
			}
		}
		end := func() {}
		if len(slow) > 0 {
			end = h.cut(slow, e.nodes)
		}
		return fmt.Sprintf("%s latency %v", target, e.latency), func() error {
			for _, p := range h.links(e.workers, e.nodes) {
				p.SetLatency(0)
			}
			end()
			return nil
		}, nil
	case Blackhole:
		for _, p := range h.links(e.workers, e.nodes) {
			p.Blackhole(true)
		}
		end := h.cut(e.workers, e.nodes)
		return target, func() error {
			for _, p := range h.links(e.workers, e.nodes) {
				p.Blackhole(false)
			}
			end()
			return nil
		}, nil
	case Reset:
		end := h.cut(e.workers, e.nodes)
		for _, p := range h.links(e.workers, e.nodes) {
			p.ResetAll()
		}
		end()
		return target, func() error { return nil }, nil
	case Pause, WorkerKill:
		w, holding := h.busyWorker()
		what := fmt.Sprintf("%s (running a job: %v)", w.name, holding)
		if e.fault == Pause {
			if err := w.signal(syscall.SIGSTOP); err != nil {
				return "", nil, err
			}
			i := len(h.tl.effects)
			h.tl.add(effect{kind: workerPaused, worker: w.idx, node: -1, from: time.Now()})
			return what, func() error {
				err := w.signal(syscall.SIGCONT)
				h.tl.effects[i].to = time.Now()
				return err
			}, nil
		}
		i := len(h.tl.effects)
		h.tl.add(effect{kind: workerKilled, worker: w.idx, node: -1, from: time.Now()})
		w.kill()
		return what, func() error {
			h.tl.effects[i].to = time.Now()
			return w.start()
		}, nil
	case FreezeAfterSuccess:
		return h.freezeAfterSuccess()
	case Skew:
		w := h.workers[e.workers[0]]
		return fmt.Sprintf("%s to %v", w.name, e.offset), func() error { return nil }, w.setOffset(e.offset)
	case WorkerStop:
		return h.stopWorker(h.workers[e.workers[0]])
	case Reload:
		w := h.workers[e.workers[0]]
		return w.name + " (config unchanged)", func() error { return nil }, w.signal(syscall.SIGHUP)
	case NodeClock:
		n := h.nodes[e.nodes[0]]
		i := len(h.tl.effects)
		h.tl.add(effect{kind: nodeClockStepped, worker: -1, node: e.nodes[0], from: time.Now()})
		if err := n.SetClockOffset(e.offset); err != nil {
			return "", nil, err
		}
		return fmt.Sprintf("node %d by %v", e.nodes[0], e.offset), func() error {
			err := n.SetClockOffset(0)
			h.tl.effects[i].to = time.Now().Add(h.s.ttl)
			return err
		}, nil
	}
	return "", nil, fmt.Errorf("unknown fault class %q", e.fault)
}

// stopWorker stops w as an operator does (SIGTERM, see worker.stop) and returns a func that
// waits until it exited, then starts it again. The worker is absent (workerStopped) from its
// exit to its new start: while it drains it still runs, and takes no new tick. A worker that
// did not exit cleanly is one of the run's problems.
func (h *harness) stopWorker(w *worker) (string, func() error, error) {
	type exit struct {
		at  time.Time
		err error
	}
	exited := make(chan exit, 1)
	go func() {
		err := w.stop()
		exited <- exit{time.Now(), err}
	}()
	return w.name, func() error {
		x := <-exited
		if x.err != nil {
			h.problems = append(h.problems, x.err.Error())
		}
		h.tl.add(effect{kind: workerStopped, worker: w.idx, node: -1, from: x.at, to: time.Now()})
		return w.start()
	}, nil
}

// freezeWait bounds how long a FreezeAfterSuccess episode waits for its worker's next success.
const freezeWait = 5 * time.Second

// freezeAfterSuccess asks a worker, picked as busyWorker does, to stop itself right after its
// next run that succeeds (see FreezeAfterSuccess), waits until it did, and returns a func that
// continues it once it was stopped for longer than the TTL. If no run succeeds within
// freezeWait, the ask is withdrawn and the episode is empty.
func (h *harness) freezeAfterSuccess() (string, func() error, error) {
	w, _ := h.busyWorker()
	if err := w.armFreeze(true); err != nil {
		return "", nil, err
	}
	seenRunning := time.Now()
	for limit := seenRunning.Add(freezeWait); !w.stopped(); seenRunning = time.Now() {
		if time.Now().After(limit) {
			if err := w.armFreeze(false); err != nil {
				return "", nil, err
			}
			if !w.stopped() { // it stopped between the last look and the withdrawal
				return w.name + " (no run succeeded: not frozen)", func() error { return nil }, nil
			}
			break
		}
		time.Sleep(2 * time.Millisecond)
	}
	i := len(h.tl.effects)
	h.tl.add(effect{kind: workerPaused, worker: w.idx, node: -1, from: seenRunning})
	return w.name + " (frozen after a success)", func() error {
		sleepCtx(context.Background(), time.Until(seenRunning.Add(h.s.ttl+500*time.Millisecond)))
		err := w.signal(syscall.SIGCONT)
		h.tl.effects[i].to = time.Now()
		return err
	}, nil
}

// busyWorker returns a worker, picked at random, among those running a job (a run started
// and not finished in the ledger's latest entries), waiting up to two job intervals for one;
// else a random worker.
func (h *harness) busyWorker() (*worker, bool) {
	ctx := context.Background()
	rc := h.ledger.Client()
	for deadline := time.Now().Add(2 * h.s.interval); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		started, err1 := rc.LRange(ctx, ledgerKey+":started", -8, -1).Result()
		finished, err2 := rc.LRange(ctx, ledgerKey, -16, -1).Result()
		if err := errors.Join(err1, err2); err != nil {
			break
		}
		var busy []*worker
		for _, s := range started {
			f := strings.Split(s, "|")
			if len(f) != 5 || slices.ContainsFunc(finished, func(l string) bool { return strings.HasPrefix(l, s+"|") }) {
				continue
			}
			for _, w := range h.workers {
				if w.name == f[2] && w.running() && !slices.Contains(busy, w) {
					busy = append(busy, w)
				}
			}
		}
		if len(busy) > 0 {
			return busy[h.rng.IntN(len(busy))], true
		}
	}
	return h.workers[h.rng.IntN(len(h.workers))], false
}

// stopWorkers stops every worker with SIGTERM (after SIGCONT) and reports those that did not
// exit cleanly in time.
func (h *harness) stopWorkers() []string {
	var problems []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, w := range h.workers {
		wg.Go(func() {
			if err := w.stop(); err != nil {
				mu.Lock()
				problems = append(problems, err.Error())
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return problems
}

// leftLocks waits until every lock a killed or paused worker may have left has expired and
// reports the run keys still on the nodes: a run that ended must not leave its lock behind.
func (h *harness) leftLocks(ctx context.Context) []string {
	if !sleepCtx(ctx, h.s.ttl+h.s.grace) {
		return nil
	}
	var problems []string
	for i, n := range h.nodes {
		keys, err := n.Client().Keys(ctx, "*:run").Result()
		if err != nil {
			problems = append(problems, fmt.Sprintf("node %d: listing run keys: %v", i, err))
			continue
		}
		for _, k := range keys {
			problems = append(problems, fmt.Sprintf("node %d: lock %s left behind after every worker stopped", i, k))
		}
	}
	return problems
}

// close stops everything the harness started.
func (h *harness) close() {
	for _, w := range h.workers {
		w.kill()
	}
	if h.watch != nil {
		for _, p := range h.watch.stop(h.s.ttl) {
			h.cfg.Logf("closing: %s", p)
		}
	}
	if h.probe != nil {
		h.probe.stop()
	}
	for _, ps := range h.proxies {
		for _, p := range ps {
			p.Close()
		}
	}
	for _, n := range h.nodes {
		n.Close()
	}
	if h.ledger != nil {
		h.ledger.Close()
	}
	if h.pg != nil {
		h.pg.Close()
	}
}

// worker is one testworker or daemon worker process (and its successors after kills).
type worker struct {
	h      *harness
	idx    int
	name   string
	daemon bool   // a cronlock run process, not a testworker
	config string // a daemon worker's config file

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been reaped
	err  error
}

func (w *worker) logFile() string { return filepath.Join(w.h.cfg.Dir, w.name+".log") }

func (w *worker) offsetFile() string { return filepath.Join(w.h.cfg.Dir, w.name+".offset") }

// setOffset writes the worker's clock offset and, if it runs, tells it to re-read it.
func (w *worker) setOffset(d time.Duration) error {
	if err := os.WriteFile(w.offsetFile(), []byte(d.String()), 0o644); err != nil {
		return err
	}
	w.h.tl.setOffset(w.idx, time.Now(), d)
	if w.running() {
		return w.signal(syscall.SIGHUP)
	}
	return nil
}

func (w *worker) nodeTimeout() time.Duration {
	if w.daemon {
		return w.h.daemonNodeTimeout
	}
	return w.h.s.nodeTimeout
}

// command returns the worker's command line.
func (w *worker) command() ([]string, error) {
	h := w.h
	if w.daemon {
		// A drain long enough for a long run: SIGTERM stops the daemon without stopping a run.
		return []string{h.cfg.Daemon, "run", "--config", w.config, "--replica", w.name,
			"--log-format", "json", "--log-level", "debug", "--drain", (4 * h.s.ttl).String()}, nil
	}
	var addrs []string
	for _, p := range h.proxies[w.idx] {
		addrs = append(addrs, p.Addr())
	}
	var names []string
	for _, j := range jobs { // the burst set is -burst's
		switch {
		case j.Forbid:
			names = append(names, j.Name)
		case j.Replace:
			names = append(names, j.Name+":replace")
		default:
			names = append(names, j.Name+":allow")
		}
	}
	data, err := os.ReadFile(w.offsetFile())
	if err != nil {
		return nil, err
	}
	fenced, fencedArg := "-fenced", fencedKey
	if h.pg != nil {
		fenced, fencedArg = "-fenced-postgres", h.pg.DSN
	}
	return []string{h.cfg.Worker,
		"-nodes", strings.Join(addrs, ","),
		"-ledger", h.ledger.Addr(), "-ledger-key", ledgerKey, fenced, fencedArg,
		"-job", strings.Join(names, ","), "-spec", "@every " + h.s.interval.String(),
		"-replica", w.name, "-offset", string(data), "-offset-file", w.offsetFile(),
		"-work", h.s.workMin.String(), "-work-max", h.s.workMax.String(), "-replace-work", (h.s.interval * 3 / 2).String(),
		"-ttl", h.s.ttl.String(), "-max-ttl", h.s.maxTTL.String(), "-node-timeout", h.s.nodeTimeout.String(),
		"-retries", strconv.Itoa(h.s.retries),
		"-duration", (h.s.warmup + h.cfg.Duration + h.s.settle + 10*time.Minute).String(), "-grace", "5s", "-check-leaks", "-v",
		"-burst", strconv.Itoa(h.burst), "-burst-spec", burstSpec, "-burst-work", h.s.burstWorkMin.String(), "-burst-work-max", h.s.burstWorkMax.String()}, nil
}

func (w *worker) start() error {
	argv, err := w.command()
	if err != nil {
		return err
	}
	log, err := os.OpenFile(w.logFile(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	w.h.tl.started(w.idx, time.Now())
	// The kernel kills the worker if the thread that started it exits: only if the harness
	// dies, because that thread stays locked to the goroutine that waits for the worker. (A
	// thread the runtime may retire — any other — would kill the worker with it: the runtime
	// retires the threads of goroutines that exit locked, as redistest's do.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	done := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is retired once the worker is reaped
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		w.mu.Lock()
		w.cmd, w.done = cmd, done
		w.mu.Unlock()
		started <- nil
		err := cmd.Wait()
		w.mu.Lock()
		w.err = err
		w.mu.Unlock()
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("starting worker %s: %w", w.name, err)
	}
	return nil
}

func (w *worker) running() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done == nil {
		return false
	}
	select {
	case <-w.done:
		return false
	default:
		return true
	}
}

func (w *worker) signal(sig syscall.Signal) error {
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("worker %s never started", w.name)
	}
	return cmd.Process.Signal(sig)
}

// armFreeze asks the worker to stop itself (SIGSTOP) right after its next run that succeeds,
// or withdraws the ask: a testworker with SIGUSR1 and SIGUSR2, a daemon worker's commands with
// the file freezeFile.
func (w *worker) armFreeze(on bool) error {
	switch {
	case !w.daemon && on:
		return w.signal(syscall.SIGUSR1)
	case !w.daemon:
		return w.signal(syscall.SIGUSR2)
	case on:
		return os.WriteFile(w.freezeFile(), nil, 0o644)
	}
	if err := os.Remove(w.freezeFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// freezeFile is the file whose presence asks a daemon worker's next successful command to
// stop its daemon; the command takes it by renaming it.
func (w *worker) freezeFile() string { return filepath.Join(w.h.cfg.Dir, w.name+".freeze") }

// stopped reports whether the worker's process is stopped (state T in /proc).
func (w *worker) stopped() bool {
	w.mu.Lock()
	cmd := w.cmd
	w.mu.Unlock()
	if cmd == nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'T'
}

// kill kills the worker and waits until it is reaped.
func (w *worker) kill() {
	if !w.running() {
		return
	}
	_ = w.signal(syscall.SIGKILL)
	<-w.done
}

// stop asks the worker to stop (SIGCONT, SIGTERM) and waits for a clean exit within its
// grace and some; a worker that does not exit is killed and reported.
func (w *worker) stop() error {
	if !w.running() {
		return fmt.Errorf("worker %s was not running at the end", w.name)
	}
	_ = w.signal(syscall.SIGCONT)
	_ = w.signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(15 * time.Second):
		w.kill()
		return fmt.Errorf("worker %s did not exit within 15s of SIGTERM: killed", w.name)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return fmt.Errorf("worker %s exited with %v (see %s.log)", w.name, w.err, w.name)
	}
	return nil
}

// sleepCtx waits for d (nothing if d ≤ 0) and reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	return ctx.Err() == nil
}
