// Command pair compares one uncontended acquire+release pair of cronlock's redlock with
// go-redsync/redsync/v4's, one library per process, so that neither shares a runtime, a heap or
// connections with the other:
//
//	go run ./cmd/pair                       # in bench/: nodes 1, 3 and 5, three rounds each
//	go run ./cmd/pair -nodes 1 -rounds 1 -commands
//
// For every node count and round it runs itself four times, alternating the libraries
// (redsync, cronlock, cronlock, redsync). Each run starts fresh redis-servers on 127.0.0.1,
// builds one go-redis client per node (the same options for both libraries), takes a fresh key
// per pair with one goroutine — cronlock: TryAcquire and Release with default options;
// redsync: NewMutex(key, WithExpiry(10s), WithTries(1)), LockContext and UnlockContext —
// warms up, then measures for a fixed duration. It prints each run (with the mean, which is
// what go test -bench reports as sec/op) and then, per node count, the medians over the runs
// of each library: the pair's p50, p90 and p99, heap allocations per pair, and the nodes' cost
// per pair from the servers' own counters (INFO): the time of the commands the client sent
// (INFO commandstats; a script's time includes the commands it calls) and the servers'
// process CPU (used_cpu_user + used_cpu_sys).
package main

import (
	"bufio"
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
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

const ttl = 10 * time.Second

// maxSamples bounds the latencies one run keeps (allocated before the run): far more pairs
// than a few seconds allow.
const maxSamples = 1 << 21

func main() {
	lib := flag.String("lib", "", "run one library in this process (cronlock or redsync) and print its result as JSON; without it, run the comparison")
	nodes := flag.String("nodes", "1,3,5", "node counts to compare, comma-separated (with -lib: one count)")
	rounds := flag.Int("rounds", 3, "rounds per node count; a round runs redsync, cronlock, cronlock, redsync")
	warmup := flag.Duration("warmup", time.Second, "warm-up before measuring, per run")
	duration := flag.Duration("duration", 4*time.Second, "measured time per run")
	commands := flag.Bool("commands", false, "also print the nodes' commands per pair (calls and µs) of each run")
	cpuprofile := flag.String("cpuprofile", "", "with -lib: write a CPU profile of the measured time to this file")
	flag.Parse()

	var err error
	if *lib != "" {
		err = child(os.Stdout, *lib, *nodes, *warmup, *duration, *cpuprofile)
	} else {
		err = compare(*nodes, *rounds, *warmup, *duration, *commands)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pair:", err)
		os.Exit(1)
	}
}

// result is one run's measurements, printed by the child as JSON.
type result struct {
	Lib      string             `json:"lib"`
	Nodes    int                `json:"nodes"`
	Pairs    int                `json:"pairs"`
	Mean     float64            `json:"mean_us"`
	P50      float64            `json:"p50_us"`
	P90      float64            `json:"p90_us"`
	P99      float64            `json:"p99_us"`
	Allocs   float64            `json:"allocs_per_pair"`
	CmdUs    float64            `json:"node_cmd_us_per_pair"` // Σ over nodes of the client's commands' time
	CPUUs    float64            `json:"node_cpu_us_per_pair"` // Σ over nodes of the servers' process CPU
	Commands map[string]cmdCost `json:"commands"`
}

// cmdCost is one command's calls and time per pair, summed over the nodes.
type cmdCost struct {
	Calls float64 `json:"calls"`
	Us    float64 `json:"us"`
}

// pairer is one library taking and releasing one lock.
type pairer interface {
	pair(ctx context.Context, key string) error
	// topLevel reports whether the client sends cmd itself (the others are called by its
	// scripts, and their time is in the script's).
	topLevel(cmd string) bool
}

type cronlockPairer struct{ c *redlock.Client }

func (p cronlockPairer) pair(ctx context.Context, key string) error {
	lk, err := p.c.TryAcquire(ctx, key, ttl)
	if err != nil {
		return err
	}
	return lk.Release(ctx)
}

func (cronlockPairer) topLevel(cmd string) bool { return cmd == "evalsha" || cmd == "eval" }

type redsyncPairer struct{ rs *redsync.Redsync }

func (p redsyncPairer) pair(ctx context.Context, key string) error {
	m := p.rs.NewMutex(key, redsync.WithExpiry(ttl), redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		return err
	}
	ok, err := m.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock not confirmed by a quorum")
	}
	return err
}

func (redsyncPairer) topLevel(cmd string) bool {
	return cmd == "set" || cmd == "evalsha" || cmd == "eval"
}

// child runs one library on fresh nodes and writes its result to w.
func child(w io.Writer, lib, nodes string, warmup, duration time.Duration, cpuprofile string) error {
	n, err := strconv.Atoi(nodes)
	if err != nil || n < 1 {
		return fmt.Errorf("-nodes %q: with -lib give one node count, e.g. -nodes 3", nodes)
	}
	servers, err := redistest.NewN(n, redistest.Config{})
	if err != nil {
		return err
	}
	defer func() {
		for _, s := range servers {
			_ = s.Close()
		}
	}()
	ctx := context.Background()
	rcs := make([]*redis.Client, n)
	for i, s := range servers {
		// Context deadlines enforced, no hidden retries: the same options for both libraries.
		rcs[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		defer rcs[i].Close()
	}
	var p pairer
	switch lib {
	case "cronlock":
		rn := make([]redlock.Node, n)
		for i, rc := range rcs {
			rn[i] = rc
		}
		c, err := redlock.New(rn)
		if err != nil {
			return err
		}
		defer c.Close()
		// The nodes are new and empty: end the quarantine that guards a node that lost its memory.
		if err := c.EndQuarantine(ctx); err != nil {
			return err
		}
		p = cronlockPairer{c}
	case "redsync":
		pools := make([]redsyncredis.Pool, n)
		for i, rc := range rcs {
			pools[i] = goredis.NewPool(rc)
		}
		p = redsyncPairer{redsync.New(pools...)}
	default:
		return fmt.Errorf("-lib %q: give cronlock or redsync", lib)
	}

	keys := 0
	key := func() string { keys++; return "pair:" + lib + ":" + strconv.Itoa(keys) }
	for end := time.Now().Add(warmup); time.Now().Before(end); {
		if err := p.pair(ctx, key()); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	// The keys are built before the clock starts, so their allocations are not counted.
	names := make([]string, 0, 1<<18)
	for range cap(names) {
		names = append(names, key())
	}
	lat := make([]time.Duration, 0, maxSamples)
	before, err := nodeStats(ctx, rcs)
	if err != nil {
		return err
	}
	if cpuprofile != "" {
		f, err := os.Create(cpuprofile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	start := time.Now()
	end := start.Add(duration)
	for i := 0; ; i++ {
		k := names[i%len(names)]
		t0 := time.Now()
		if err := p.pair(ctx, k); err != nil {
			return err
		}
		t1 := time.Now()
		if len(lat) < cap(lat) {
			lat = append(lat, t1.Sub(t0))
		}
		if !t1.Before(end) {
			break
		}
	}
	runtime.ReadMemStats(&m1)
	if cpuprofile != "" {
		pprof.StopCPUProfile()
	}
	after, err := nodeStats(ctx, rcs)
	if err != nil {
		return err
	}
	pairs := float64(len(lat))
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	r := result{Lib: lib, Nodes: n, Pairs: len(lat), Mean: float64(sum) / pairs / float64(time.Microsecond), Allocs: float64(m1.Mallocs-m0.Mallocs) / pairs, Commands: map[string]cmdCost{}}
	slices.Sort(lat)
	r.P50, r.P90, r.P99 = quantile(lat, 0.50), quantile(lat, 0.90), quantile(lat, 0.99)
	r.CPUUs = (after.cpu - before.cpu) / pairs
	for cmd, a := range after.cmds {
		b := before.cmds[cmd]
		c := cmdCost{Calls: float64(a.calls-b.calls) / pairs, Us: float64(a.usec-b.usec) / pairs}
		if c.Calls == 0 {
			continue
		}
		r.Commands[cmd] = c
		if p.topLevel(cmd) {
			r.CmdUs += c.Us
		}
	}
	return json.NewEncoder(w).Encode(r)
}

func quantile(sorted []time.Duration, q float64) float64 {
	return float64(sorted[int(q*float64(len(sorted)-1))]) / float64(time.Microsecond)
}

type stat struct{ calls, usec int64 }

// stats are the servers' counters, summed over the nodes.
type stats struct {
	cmds map[string]stat // INFO commandstats, by command
	cpu  float64         // used_cpu_user + used_cpu_sys, µs
}

// nodeStats reads the counters. The INFO command itself is not in commandstats until it
// returns, so one reading before and one after count none of theirs.
func nodeStats(ctx context.Context, rcs []*redis.Client) (stats, error) {
	s := stats{cmds: map[string]stat{}}
	for _, rc := range rcs {
		info, err := rc.Info(ctx, "commandstats", "cpu").Result()
		if err != nil {
			return s, err
		}
		sc := bufio.NewScanner(strings.NewReader(info))
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			name, val, ok := strings.Cut(line, ":")
			if !ok {
				continue
			}
			switch {
			case name == "used_cpu_user" || name == "used_cpu_sys":
				f, _ := strconv.ParseFloat(val, 64)
				s.cpu += f * 1e6
			case strings.HasPrefix(name, "cmdstat_"):
				var st stat
				for _, kv := range strings.Split(val, ",") {
					k, v, _ := strings.Cut(kv, "=")
					switch k {
					case "calls":
						st.calls, _ = strconv.ParseInt(v, 10, 64)
					case "usec":
						st.usec, _ = strconv.ParseInt(v, 10, 64)
					}
				}
				cmd := strings.TrimPrefix(name, "cmdstat_")
				old := s.cmds[cmd]
				s.cmds[cmd] = stat{old.calls + st.calls, old.usec + st.usec}
			}
		}
	}
	return s, nil
}

// compare runs the children, alternating the libraries, and prints the runs and the medians.
func compare(nodes string, rounds int, warmup, duration time.Duration, commands bool) error {
	self, err := os.Executable()
	if err != nil {
		return err
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
	fmt.Printf("# %s, GOMAXPROCS %d; %s warm-up, %s measured per run\n", runtime.Version(), runtime.GOMAXPROCS(0), warmup, duration)
	fmt.Printf("%-8s %5s %7s %8s %8s %8s %8s %7s %8s %8s\n", "lib", "nodes", "pairs", "mean-µs", "p50-µs", "p90-µs", "p99-µs", "allocs", "node-cmd", "node-cpu")
	var summary []string
	for _, n := range counts {
		runs := map[string][]result{}
		for range rounds {
			for _, lib := range []string{"redsync", "cronlock", "cronlock", "redsync"} {
				r, err := run(self, lib, n, warmup, duration)
				if err != nil {
					return err
				}
				runs[lib] = append(runs[lib], r)
				fmt.Printf("%-8s %5d %7d %8.1f %8.1f %8.1f %8.1f %7.1f %8.1f %8.1f\n", r.Lib, r.Nodes, r.Pairs, r.Mean, r.P50, r.P90, r.P99, r.Allocs, r.CmdUs, r.CPUUs)
				if commands {
					printCommands(r)
				}
			}
		}
		summary = append(summary, summarize(n, runs["cronlock"], runs["redsync"])...)
	}
	fmt.Println()
	fmt.Println("# medians over the runs (min–max); node-cmd: the commands' time on the nodes per pair (INFO commandstats); node-cpu: the servers' CPU per pair")
	fmt.Printf("%5s %-8s %-22s %8s %8s %7s %8s %8s %s\n", "nodes", "lib", "p50-µs", "p90-µs", "p99-µs", "allocs", "node-cmd", "node-cpu", "p50 ratio")
	for _, l := range summary {
		fmt.Println(l)
	}
	return nil
}

func run(self, lib string, n int, warmup, duration time.Duration) (result, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(self, "-lib", lib, "-nodes", strconv.Itoa(n), "-warmup", warmup.String(), "-duration", duration.String())
	cmd.Stdout, cmd.Stderr = &out, &errb
	var r result
	if err := cmd.Run(); err != nil {
		return r, fmt.Errorf("%s on %d nodes: %w: %s", lib, n, err, strings.TrimSpace(errb.String()))
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		return r, fmt.Errorf("%s on %d nodes: reading its result: %w", lib, n, err)
	}
	return r, nil
}

func printCommands(r result) {
	cmds := make([]string, 0, len(r.Commands))
	for c := range r.Commands {
		cmds = append(cmds, c)
	}
	slices.Sort(cmds)
	for _, c := range cmds {
		fmt.Printf("    %-14s %6.2f calls %7.2f µs per pair\n", c, r.Commands[c].Calls, r.Commands[c].Us)
	}
}

func summarize(n int, cl, rs []result) []string {
	var lines []string
	var p50 [2]float64
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
		lo, hi := runs[0].P50, runs[0].P50
		for _, r := range runs {
			lo, hi = min(lo, r.P50), max(hi, r.P50)
		}
		p50[i] = med(func(r result) float64 { return r.P50 })
		lines = append(lines, fmt.Sprintf("%5d %-8s %-22s %8.1f %8.1f %7.1f %8.1f %8.1f", n, runs[0].Lib,
			fmt.Sprintf("%.1f (%.1f–%.1f)", p50[i], lo, hi),
			med(func(r result) float64 { return r.P90 }), med(func(r result) float64 { return r.P99 }),
			med(func(r result) float64 { return r.Allocs }), med(func(r result) float64 { return r.CmdUs }),
			med(func(r result) float64 { return r.CPUUs })))
	}
	lines[0] += fmt.Sprintf(" %.2f×", p50[0]/p50[1])
	return lines
}
