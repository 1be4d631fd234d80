// Command pair compares cronlock's redlock with go-redsync/redsync/v4, one library per
// process, so that neither shares a runtime, a heap or connections with the other. It has two
// workloads:
//
//	go run ./cmd/pair                       # in bench/: the pair workload, nodes 1, 3 and 5, three rounds each
//	go run ./cmd/pair -nodes 1 -rounds 1 -commands
//	go run ./cmd/pair -workload racers      # 32 racers on one key, 5 nodes
//
// For every node count and round it runs itself four times, alternating the libraries
// (redsync, cronlock, cronlock, redsync). Each run starts fresh redis-servers on 127.0.0.1 and
// builds go-redis clients with the same options for both libraries, warms up, then measures
// for a fixed duration. cronlock takes its locks with TryAcquire and Release and default
// options; redsync with NewMutex(key, WithExpiry(10s), WithTries(1)), LockContext and
// UnlockContext.
//
// The pair workload (-workload pair, the default) takes a fresh key per uncontended
// acquire+release pair with one goroutine and one client per node. Per run it prints the
// pair's mean (what go test -bench reports as sec/op), p50, p90 and p99.
//
// The racers workload (-workload racers) races 32 racers for one key, each with its own
// library client and its own connections, each making one attempt per try in a tight loop and
// releasing at once what it won. Per run it prints the acquisitions per second and the
// attempts per acquisition. An atomic holder counter fails the run if two racers ever hold the
// lock at once.
//
// Both print the heap allocations per pair (per acquisition for racers) and the nodes' cost
// per pair from the servers' own counters (INFO): the time of the commands the clients sent
// (INFO commandstats; a script's time includes the commands it calls) and the servers' process
// CPU (used_cpu_user + used_cpu_sys); then, per node count, the medians over the runs of each
// library and the ratio cronlock / redsync.
//
// Times depend on what else the machine runs. With -callgrind the nodes run under valgrind's
// callgrind, and each run also reports the instructions the servers executed per pair (in
// user space, summed over the nodes): a count that a loaded machine does not change. Such runs
// are many times slower, so their times are not comparable with others.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/bench/internal/nodecost"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

const ttl = 10 * time.Second

// maxSamples bounds the latencies one run keeps (allocated before the run): far more pairs
// than a few seconds allow.
const maxSamples = 1 << 21

// racers is how many racers the racers workload runs.
const racers = 32

// The workloads.
const (
	workloadPair   = "pair"
	workloadRacers = "racers"
)

func main() {
	lib := flag.String("lib", "", "run one library in this process (cronlock or redsync) and print its result as JSON; without it, run the comparison")
	workload := flag.String("workload", workloadPair, "pair: uncontended acquire+release pairs on fresh keys; racers: 32 racers on one key")
	nodes := flag.String("nodes", "", "node counts to compare, comma-separated (with -lib: one count); default 1,3,5 for pair, 5 for racers")
	rounds := flag.Int("rounds", 3, "rounds per node count; a round runs redsync, cronlock, cronlock, redsync")
	warmup := flag.Duration("warmup", time.Second, "warm-up before measuring, per run")
	duration := flag.Duration("duration", 4*time.Second, "measured time per run")
	commands := flag.Bool("commands", false, "also print the nodes' commands per pair (calls and µs) of each run")
	cpuprofile := flag.String("cpuprofile", "", "with -lib: write a CPU profile of the measured time to this file")
	callgrind := flag.Bool("callgrind", false, "run the nodes under valgrind's callgrind and report the instructions they executed per pair (node-Ir)")
	callgrindDir := flag.String("callgrind-dir", "", "with -lib and -callgrind: keep the nodes' callgrind files (node.PID.1, the measured time) in this directory, for callgrind_annotate")
	flag.Parse()

	if *nodes == "" {
		*nodes = "1,3,5"
		if *workload == workloadRacers {
			*nodes = "5"
		}
	}
	var err error
	if *callgrindDir != "" && (*lib == "" || !*callgrind) {
		err = errors.New("-callgrind-dir goes with -lib and -callgrind")
	} else if *lib != "" {
		err = child(os.Stdout, *lib, *workload, *nodes, *warmup, *duration, *cpuprofile, *callgrind, *callgrindDir)
	} else {
		err = compare(*workload, *nodes, *rounds, *warmup, *duration, *commands, *callgrind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pair:", err)
		os.Exit(1)
	}
}

// result is one run's measurements, printed by the child as JSON. The costs are per pair in
// the pair workload, per acquisition in the racers workload.
type result struct {
	Lib      string             `json:"lib"`
	Workload string             `json:"workload"`
	Nodes    int                `json:"nodes"`
	Pairs    int                `json:"pairs"` // pairs, or the racers' acquisitions
	Mean     float64            `json:"mean_us,omitempty"`
	P50      float64            `json:"p50_us,omitempty"`
	P90      float64            `json:"p90_us,omitempty"`
	P99      float64            `json:"p99_us,omitempty"`
	PerSec   float64            `json:"acquisitions_per_s,omitempty"`       // racers
	Attempts float64            `json:"attempts_per_acquisition,omitempty"` // racers
	Errors   int                `json:"errors,omitempty"`                   // racers: attempts that failed for another reason than a held lock
	LastErr  string             `json:"last_error,omitempty"`
	Allocs   float64            `json:"allocs_per_pair"`
	CmdUs    float64            `json:"node_cmd_us_per_pair"`                 // Σ over nodes of the client's commands' time
	CPUUs    float64            `json:"node_cpu_us_per_pair"`                 // Σ over nodes of the servers' process CPU
	Instr    float64            `json:"node_instructions_per_pair,omitempty"` // -callgrind: Σ over nodes of the servers' instructions
	Commands map[string]cmdCost `json:"commands"`
}

// cmdCost is one command's calls and time per pair, summed over the nodes.
type cmdCost struct {
	Calls float64 `json:"calls"`
	Us    float64 `json:"us"`
}

// locker is one library's client, taking and releasing one lock at a time, used by one
// goroutine.
type locker interface {
	// try makes one attempt to take key; it returns false and no error when the lock is held
	// elsewhere.
	try(ctx context.Context, key string) (bool, error)
	// release releases the lock of the last successful try.
	release(ctx context.Context) error
	// topLevel reports whether the client sends cmd itself (the others are called by its
	// scripts, and their time is in the script's).
	topLevel(cmd string) bool
}

type cronlockLocker struct {
	c    *redlock.Client
	held *redlock.Lock
}

func (l *cronlockLocker) try(ctx context.Context, key string) (bool, error) {
	lk, err := l.c.TryAcquire(ctx, key, ttl)
	if errors.Is(err, redlock.ErrNotAcquired) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	l.held = lk
	return true, nil
}

func (l *cronlockLocker) release(ctx context.Context) error { return l.held.Release(ctx) }

func (*cronlockLocker) topLevel(cmd string) bool { return cmd == "evalsha" || cmd == "eval" }

// redsyncLocker makes a Mutex for each new key, and uses it for every try of that key.
type redsyncLocker struct {
	rs  *redsync.Redsync
	key string
	m   *redsync.Mutex
}

func (l *redsyncLocker) try(ctx context.Context, key string) (bool, error) {
	if l.m == nil || key != l.key {
		l.key, l.m = key, l.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	}
	err := l.m.LockContext(ctx)
	var taken *redsync.ErrTaken
	var nodeTaken *redsync.ErrNodeTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) || errors.As(err, &nodeTaken) {
		return false, nil
	}
	return err == nil, err
}

func (l *redsyncLocker) release(ctx context.Context) error {
	ok, err := l.m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock not confirmed by a quorum")
	}
	return err
}

func (*redsyncLocker) topLevel(cmd string) bool {
	return cmd == "set" || cmd == "evalsha" || cmd == "eval"
}

// newLocker returns a locker of lib over new go-redis clients to the servers, and a function
// that closes them. Both libraries get the same client options: context deadlines enforced, no
// hidden retries.
func newLocker(ctx context.Context, lib string, servers []*redistest.Server) (locker, func(), error) {
	rcs := make([]*redis.Client, len(servers))
	for i, s := range servers {
		rcs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	}
	closeAll := func() {
		for _, rc := range rcs {
			_ = rc.Close()
		}
	}
	switch lib {
	case "cronlock":
		rn := make([]redlock.Node, len(rcs))
		for i, rc := range rcs {
			rn[i] = rc
		}
		c, err := redlock.New(rn)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		closeClient := func() { _ = c.Close(); closeAll() }
		// The nodes are new and empty: end the quarantine that guards a node that lost its memory.
		if err := c.EndQuarantine(ctx); err != nil {
			closeClient()
			return nil, nil, err
		}
		return &cronlockLocker{c: c}, closeClient, nil
	case "redsync":
		pools := make([]redsyncredis.Pool, len(rcs))
		for i, rc := range rcs {
			pools[i] = goredis.NewPool(rc)
		}
		return &redsyncLocker{rs: redsync.New(pools...)}, closeAll, nil
	}
	closeAll()
	return nil, nil, fmt.Errorf("-lib %q: give cronlock or redsync", lib)
}

// child runs one library's workload on fresh nodes and writes its result to w.
func child(w io.Writer, lib, workload, nodes string, warmup, duration time.Duration, cpuprofile string, callgrind bool, callgrindDir string) error {
	n, err := strconv.Atoi(nodes)
	if err != nil || n < 1 {
		return fmt.Errorf("-nodes %q: with -lib give one node count, e.g. -nodes 3", nodes)
	}
	if lib != "cronlock" && lib != "redsync" {
		return fmt.Errorf("-lib %q: give cronlock or redsync", lib)
	}
	if workload != workloadPair && workload != workloadRacers {
		return fmt.Errorf("-workload %q: give pair or racers", workload)
	}
	var cfg redistest.Config
	var cg *nodecost.Callgrind
	if callgrind {
		if cg, err = nodecost.NewCallgrind(callgrindDir); err != nil {
			return err
		}
		defer cg.Close()
		cfg.Wrap = cg.Wrap()
	}
	servers, err := redistest.NewN(n, cfg)
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	if cg != nil {
		for _, s := range servers {
			cg.Watch(s.PID())
		}
	}
	ctx := context.Background()
	// The clients that read the nodes' counters, apart from the libraries'.
	rcs := make([]*redis.Client, n)
	for i, s := range servers {
		rcs[i] = redis.NewClient(&redis.Options{Addr: s.Addr()})
		defer rcs[i].Close()
	}
	m := &measure{rcs: rcs, cpuprofile: cpuprofile, callgrind: cg}
	var r result
	if workload == workloadPair {
		r, err = pairs(ctx, lib, servers, warmup, duration, m)
	} else {
		r, err = race(ctx, lib, servers, warmup, duration, m)
	}
	if err != nil {
		return err
	}
	r.Lib, r.Workload, r.Nodes = lib, workload, n
	return json.NewEncoder(w).Encode(r)
}

// pairs runs the pair workload: one goroutine, a fresh key per pair.
func pairs(ctx context.Context, lib string, servers []*redistest.Server, warmup, duration time.Duration, m *measure) (result, error) {
	var r result
	l, closeLocker, err := newLocker(ctx, lib, servers)
	if err != nil {
		return r, err
	}
	defer closeLocker()
	pair := func(key string) error {
		ok, err := l.try(ctx, key)
		if err == nil && !ok {
			err = fmt.Errorf("lock %s: held elsewhere", key)
		}
		if err != nil {
			return err
		}
		return l.release(ctx)
	}
	keys := 0
	key := func() string { keys++; return "pair:" + lib + ":" + strconv.Itoa(keys) }
	for end := time.Now().Add(warmup); time.Now().Before(end); {
		if err := pair(key()); err != nil {
			return r, fmt.Errorf("warm-up: %w", err)
		}
	}
	// The keys are built before the clock starts, so their allocations are not counted.
	names := make([]string, 0, 1<<18)
	for range cap(names) {
		names = append(names, key())
	}
	lat := make([]time.Duration, 0, maxSamples)
	if err := m.start(ctx); err != nil {
		return r, err
	}
	end := time.Now().Add(duration)
	for i := 0; ; i++ {
		k := names[i%len(names)]
		t0 := time.Now()
		if err := pair(k); err != nil {
			m.stopProfile()
			return r, err
		}
		t1 := time.Now()
		if len(lat) < cap(lat) {
			lat = append(lat, t1.Sub(t0))
		}
		if !t1.Before(end) {
			break
		}
	}
	if r, err = m.stop(ctx, len(lat), l); err != nil {
		return r, err
	}
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	r.Mean = float64(sum) / float64(len(lat)) / float64(time.Microsecond)
	slices.Sort(lat)
	r.P50, r.P90, r.P99 = quantile(lat, 0.50), quantile(lat, 0.90), quantile(lat, 0.99)
	return r, nil
}

// race runs the racers workload: racers goroutines, each with a locker of its own, try one key
// in a tight loop, and release at once what they win.
func race(ctx context.Context, lib string, servers []*redistest.Server, warmup, duration time.Duration, m *measure) (result, error) {
	var r result
	lockers := make([]locker, racers)
	for i := range lockers {
		l, closeLocker, err := newLocker(ctx, lib, servers)
		if err != nil {
			return r, err
		}
		defer closeLocker()
		lockers[i] = l
	}
	key := "racers:" + lib
	var (
		holders            atomic.Int32
		overlaps           atomic.Int64 // acquisitions that found another holder
		acquired, attempts atomic.Int64
		failures           atomic.Int64 // attempts and releases that failed for another reason than a held lock
		lastErr            atomic.Value
		stop               = make(chan struct{})
		wg                 sync.WaitGroup
	)
	fail := func(err error) {
		failures.Add(1)
		lastErr.Store(err.Error())
	}
	for _, l := range lockers {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				attempts.Add(1)
				ok, err := l.try(ctx, key)
				if err != nil {
					fail(err)
				}
				if !ok {
					continue
				}
				// No hold time, but a yield to the other racers while held, so that a second
				// holder, if any, is likely to be counted here.
				if holders.Add(1) != 1 {
					overlaps.Add(1)
				}
				acquired.Add(1)
				runtime.Gosched()
				holders.Add(-1)
				if err := l.release(ctx); err != nil {
					fail(err)
				}
			}
		})
	}
	stopRacers := func() {
		close(stop)
		wg.Wait()
	}
	time.Sleep(warmup)
	if err := m.start(ctx); err != nil {
		stopRacers()
		return r, err
	}
	acq0, att0, fail0 := acquired.Load(), attempts.Load(), failures.Load()
	time.Sleep(duration)
	// Stopped before the counters are read, so that every command the nodes counted belongs to
	// a counted attempt (but those in flight at the start).
	stopRacers()
	acq1, att1, fail1 := acquired.Load(), attempts.Load(), failures.Load()
	r, err := m.stop(ctx, int(acq1-acq0), lockers[0])
	if n := overlaps.Load(); n > 0 {
		return r, fmt.Errorf("two holders at once, %d times: the lock was held twice", n)
	}
	if err != nil {
		return r, err
	}
	if acq1 == acq0 {
		return r, fmt.Errorf("no acquisition in %v (%d attempts, %d failures, last: %v)", duration, att1-att0, fail1-fail0, lastErr.Load())
	}
	r.PerSec = float64(acq1-acq0) / m.elapsed.Seconds()
	r.Attempts = float64(att1-att0) / float64(acq1-acq0)
	r.Errors = int(fail1 - fail0)
	if r.Errors > 0 {
		r.LastErr, _ = lastErr.Load().(string)
	}
	return r, nil
}

// measure takes the measured part of a run: the CPU profile, the heap allocations and the
// nodes' counters.
type measure struct {
	rcs        []*redis.Client
	cpuprofile string
	callgrind  *nodecost.Callgrind // nil unless -callgrind
	prof       *os.File
	before     nodecost.Stats
	m0         runtime.MemStats
	t0         time.Time
	elapsed    time.Duration
}

// start reads the counters and starts the profile, if asked for.
func (m *measure) start(ctx context.Context) error {
	var err error
	if m.before, err = nodecost.Read(ctx, m.rcs); err != nil {
		return err
	}
	if m.callgrind != nil {
		if err := m.callgrind.Zero(); err != nil {
			return err
		}
	}
	if m.cpuprofile != "" {
		if m.prof, err = os.Create(m.cpuprofile); err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(m.prof); err != nil {
			_ = m.prof.Close()
			m.prof = nil
			return err
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m.m0)
	m.t0 = time.Now()
	return nil
}

// stopProfile stops the CPU profile, if one was started.
func (m *measure) stopProfile() {
	if m.prof != nil {
		pprof.StopCPUProfile()
		_ = m.prof.Close()
		m.prof = nil
	}
}

// stop ends the measurement of n pairs (or acquisitions) and returns their costs; l tells the
// commands that the library sends itself.
func (m *measure) stop(ctx context.Context, n int, l locker) (result, error) {
	m.elapsed = time.Since(m.t0)
	var m1 runtime.MemStats
	runtime.ReadMemStats(&m1)
	m.stopProfile()
	r := result{Pairs: n, Commands: map[string]cmdCost{}}
	if n == 0 {
		return r, nil
	}
	per := float64(n)
	if m.callgrind != nil { // before INFO, whose instructions are not the pairs'
		instr, err := m.callgrind.Dump()
		if err != nil {
			return r, err
		}
		r.Instr = float64(instr) / per
	}
	after, err := nodecost.Read(ctx, m.rcs)
	if err != nil {
		return r, err
	}
	d := after.Since(m.before)
	r.Allocs = float64(m1.Mallocs-m.m0.Mallocs) / per
	r.CPUUs = d.CPUus / per
	for cmd, c := range d.Commands {
		r.Commands[cmd] = cmdCost{Calls: float64(c.Calls) / per, Us: float64(c.Usec) / per}
		if l.topLevel(cmd) {
			r.CmdUs += r.Commands[cmd].Us
		}
	}
	return r, nil
}
func quantile(sorted []time.Duration, q float64) float64 {
	return float64(sorted[int(q*float64(len(sorted)-1))]) / float64(time.Microsecond)
}

// compare runs the children, alternating the libraries, and prints the runs and the medians.
func compare(workload, nodes string, rounds int, warmup, duration time.Duration, commands, callgrind bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	if workload != workloadPair && workload != workloadRacers {
		return fmt.Errorf("-workload %q: give pair or racers", workload)
	}
	var counts []int
	for _, f := range strings.Split(nodes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-nodes %q: give node counts separated by commas, e.g. 1,3,5", nodes)
		}
		counts = append(counts, n)
	}
	if rounds < 1 {
		return fmt.Errorf("-rounds %d: give at least 1", rounds)
	}
	racing := workload == workloadRacers
	unit := "pair"
	fmt.Printf("# %s, GOMAXPROCS %d; %s warm-up, %s measured per run\n", runtime.Version(), runtime.GOMAXPROCS(0), warmup, duration)
	if racing {
		unit = "acquisition"
		fmt.Printf("# %d racers on one key; costs per acquisition\n", racers)
		fmt.Printf("%-8s %5s %8s %9s %8s %7s %8s %8s %6s%s\n", "lib", "nodes", "acquired", "acq/s", "attempts", "allocs", "node-cmd", "node-cpu", "errors", instrHeader(callgrind))
	} else {
		fmt.Printf("%-8s %5s %7s %8s %8s %8s %8s %7s %8s %8s%s\n", "lib", "nodes", "pairs", "mean-µs", "p50-µs", "p90-µs", "p99-µs", "allocs", "node-cmd", "node-cpu", instrHeader(callgrind))
	}
	var summary []string
	for _, n := range counts {
		runs := map[string][]result{}
		for range rounds {
			for _, lib := range []string{"redsync", "cronlock", "cronlock", "redsync"} {
				r, err := run(self, lib, workload, n, warmup, duration, callgrind)
				if err != nil {
					return err
				}
				runs[lib] = append(runs[lib], r)
				if racing {
					fmt.Printf("%-8s %5d %8d %9.1f %8.2f %7.1f %8.1f %8.1f %6d%s\n", r.Lib, r.Nodes, r.Pairs, r.PerSec, r.Attempts, r.Allocs, r.CmdUs, r.CPUUs, r.Errors, instrColumn(callgrind, r.Instr))
					if r.Errors > 0 {
						fmt.Printf("    last error: %s\n", r.LastErr)
					}
				} else {
					fmt.Printf("%-8s %5d %7d %8.1f %8.1f %8.1f %8.1f %7.1f %8.1f %8.1f%s\n", r.Lib, r.Nodes, r.Pairs, r.Mean, r.P50, r.P90, r.P99, r.Allocs, r.CmdUs, r.CPUUs, instrColumn(callgrind, r.Instr))
				}
				if commands {
					printCommands(r, unit)
				}
			}
		}
		summary = append(summary, summarize(racing, callgrind, n, runs["cronlock"], runs["redsync"])...)
	}
	fmt.Println()
	fmt.Printf("# medians over the runs (min–max); node-cmd: the commands' time on the nodes per %s (INFO commandstats); node-cpu: the servers' CPU per %s\n", unit, unit)
	if callgrind {
		fmt.Printf("# node-Ir: the instructions the servers executed per %s (callgrind); ratio: cronlock / redsync\n", unit)
	}
	if racing {
		fmt.Printf("%5s %-8s %-26s %8s %7s %8s %8s%s %s\n", "nodes", "lib", "acq/s", "attempts", "allocs", "node-cmd", "node-cpu", instrHeader(callgrind), "acq/s ratio")
	} else {
		fmt.Printf("%5s %-8s %-22s %8s %8s %7s %8s %8s%s %s\n", "nodes", "lib", "p50-µs", "p90-µs", "p99-µs", "allocs", "node-cmd", "node-cpu", instrHeader(callgrind), "p50 ratio")
	}
	for _, l := range summary {
		fmt.Println(l)
	}
	return nil
}

func run(self, lib, workload string, n int, warmup, duration time.Duration, callgrind bool) (result, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(self, "-lib", lib, "-workload", workload, "-nodes", strconv.Itoa(n), "-warmup", warmup.String(), "-duration", duration.String(),
		"-callgrind="+strconv.FormatBool(callgrind))
	cmd.Stdout, cmd.Stderr = &out, &errb
	var r result
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("%s %s on %d nodes: %w: %s", lib, workload, n, err, strings.TrimSpace(errb.String()))
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("%s %s on %d nodes: reading its result: %w", lib, workload, n, err)
	}
	return r, nil
}

func printCommands(r result, unit string) {
	cmds := make([]string, 0, len(r.Commands))
	for c := range r.Commands {
		cmds = append(cmds, c)
	}
	slices.Sort(cmds)
	for _, c := range cmds {
		fmt.Printf("    %-14s %6.2f calls %7.2f µs per %s\n", c, r.Commands[c].Calls, r.Commands[c].Us, unit)
	}
}

// summarize returns the lines of the medians of cronlock's runs cl and redsync's rs on n
// nodes, with the ratio of their headline figures: the p50 of a pair, or the racers'
// acquisitions per second.
func summarize(racing, callgrind bool, n int, cl, rs []result) []string {
	headline := func(r result) float64 { return r.P50 }
	if racing {
		headline = func(r result) float64 { return r.PerSec }
	}
	var lines []string
	var top, instr [2]float64
	for i, runs := range [][]result{cl, rs} {
		med := func(f func(result) float64) float64 {
			v := make([]float64, len(runs))
			for j, r := range runs {
				v[j] = f(r)
			}
			slices.Sort(v)
			if len(v)%2 == 0 {
				return (v[len(v)/2-1] + v[len(v)/2]) / 2
			}
			return v[len(v)/2]
		}
		lo, hi := headline(runs[0]), headline(runs[0])
		for _, r := range runs {
			lo, hi = min(lo, headline(r)), max(hi, headline(r))
		}
		top[i] = med(headline)
		instr[i] = med(func(r result) float64 { return r.Instr })
		costs := fmt.Sprintf("%7.1f %8.1f %8.1f%s", med(func(r result) float64 { return r.Allocs }),
			med(func(r result) float64 { return r.CmdUs }), med(func(r result) float64 { return r.CPUUs }), instrColumn(callgrind, instr[i]))
		if racing {
			lines = append(lines, fmt.Sprintf("%5d %-8s %-26s %8.2f %s", n, runs[0].Lib,
				fmt.Sprintf("%.1f (%.1f–%.1f)", top[i], lo, hi), med(func(r result) float64 { return r.Attempts }), costs))
		} else {
			lines = append(lines, fmt.Sprintf("%5d %-8s %-22s %8.1f %8.1f %s", n, runs[0].Lib,
				fmt.Sprintf("%.1f (%.1f–%.1f)", top[i], lo, hi),
				med(func(r result) float64 { return r.P90 }), med(func(r result) float64 { return r.P99 }), costs))
		}
	}
	lines[0] += fmt.Sprintf(" %.2f×", top[0]/top[1])
	if callgrind {
		lines[0] += fmt.Sprintf(" (node-Ir %.2f×)", instr[0]/instr[1])
	}
	return lines
}

// instrHeader and instrColumn add the node-Ir column with -callgrind.
func instrHeader(callgrind bool) string {
	if !callgrind {
		return ""
	}
	return fmt.Sprintf(" %9s", "node-Ir")
}

func instrColumn(callgrind bool, instr float64) string {
	if !callgrind {
		return ""
	}
	return fmt.Sprintf(" %9.0f", instr)
}
