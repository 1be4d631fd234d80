package scheduler_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// roundTrips counts the commands sent to the nodes, by redlock script (named from the SHA-1 of
// redlock/scripts/*.lua) or command name, their sum ("commands"), and the round trips that
// carried them ("roundtrips": a pipeline is one).
type roundTrips struct {
	names map[string]string // script SHA-1 → file name
	mu    sync.Mutex
	n     map[string]int64
}

func newRoundTrips(tb testing.TB) *roundTrips {
	rt := &roundTrips{names: map[string]string{}, n: map[string]int64{}}
	files, err := filepath.Glob("../redlock/scripts/*.lua")
	require.NoError(tb, err)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(tb, err)
		sum := sha1.Sum(src)
		rt.names[hex.EncodeToString(sum[:])] = strings.TrimSuffix(filepath.Base(f), ".lua")
	}
	return rt
}

// count counts one round trip carrying cmds.
func (rt *roundTrips) count(cmds ...redis.Cmder) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.n["roundtrips"]++
	for _, cmd := range cmds {
		name := cmd.Name()
		if args := cmd.Args(); (name == "evalsha" || name == "eval") && len(args) > 1 {
			if script, ok := rt.names[fmt.Sprint(args[1])]; ok {
				name = script
			}
		}
		rt.n[name]++
		rt.n["commands"]++
	}
}

func (rt *roundTrips) snapshot() map[string]int64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return maps.Clone(rt.n)
}

func (rt *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (rt *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		rt.count(cmd)
		return next(ctx, cmd)
	}
}

func (rt *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rt.count(cmds...)
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*roundTrips)(nil)

// countedClient returns a redlock client of its own over the nodes of c (own go-redis clients,
// as a separate process would have) whose commands counter counts; all are closed at cleanup.
func countedClient(tb testing.TB, c *cluster, counter *roundTrips) *redlock.Client {
	var nodes []redlock.Node
	for _, s := range c.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1, DisableIdentity: true})
		rc.AddHook(counter)
		tb.Cleanup(func() { _ = rc.Close() })
		nodes = append(nodes, rc)
	}
	lc, err := redlock.New(nodes)
	require.NoError(tb, err)
	tb.Cleanup(func() { _ = lc.Close() })
	return lc
}

// cpuTime returns the process's user + system CPU time.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	require.NoError(b, syscall.Getrusage(syscall.RUSAGE_SELF, &ru))
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(float64(len(sorted))*p))]
}

// benchScheduler runs replicas replicas — Schedulers in this one process, each with its own
// redlock client and go-redis clients, as separate processes would have — each with the same
// jobs jobs, on 3 real nodes, for b.N seconds after a warm-up of warmupRuns runs (scripts
// loaded; the fencing counters of the nodes, which start from each node's clock, converge over
// the first few runs of each job; the lock clients learn which keys are contended). Over the
// measured seconds it reports the lateness, from the scheduled instant, of the dispatch (the
// tick's goroutine entering the handler chain) and of the job's start (after its lock was
// taken): overall, and per instant (the median and the worst of the instants' p99 and max);
// runs, missed ticks (no replica ran them) and duplicates (runs of a tick after its first),
// counted from a ledger of every run against the ticks the specs give; process CPU per run (all
// the replicas, their lock clients and go-redis; not redis-server); and commands and round trips
// (a pipeline is one) per node per run.
func benchScheduler(b *testing.B, replicas, jobs, warmupRuns int, spec func(i int) string) {
	c := newCluster(b, 3, false)
	counter := newRoundTrips(b)
	type ran struct {
		job             int
		tick            time.Time
		dispatch, start time.Duration // lateness
	}
	var (
		mu     sync.Mutex
		ledger []ran
	)
	type dispatchKey struct{}
	measure := func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			r, _ := job.RunFrom(ctx)
			return next(context.WithValue(ctx, dispatchKey{}, time.Since(r.Tick)))
		}
	}
	handler := func(i int) job.Handler {
		return func(ctx context.Context) error {
			r, _ := job.RunFrom(ctx)
			late := time.Since(r.Tick)
			d, _ := ctx.Value(dispatchKey{}).(time.Duration)
			mu.Lock()
			ledger = append(ledger, ran{job: i, tick: r.Tick, dispatch: d, start: late})
			mu.Unlock()
			return nil
		}
	}
	runs := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(ledger)
	}
	var (
		addTime time.Duration
		scheds  []*scheduler.Scheduler
	)
	for r := range replicas {
		lc := countedClient(b, c, counter)
		if r == 0 {
			require.NoError(b, lc.EndQuarantine(context.Background()))
		}
		s := newScheduler(b, lc, scheduler.WithReplica(fmt.Sprint("bench-", r)), scheduler.WithMiddleware(measure))
		addStart := time.Now()
		for i := range jobs {
			require.NoError(b, s.Add(job.Job{Name: fmt.Sprint("job-", i), Spec: spec(i), Handler: handler(i)}))
		}
		addTime += time.Since(addStart)
		scheds = append(scheds, s)
	}
	for _, s := range scheds {
		require.NoError(b, s.Start())
	}

	for runs() < warmupRuns {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	rt0, cpu0, from := counter.snapshot(), cpuTime(b), time.Now()
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	to, cpu := time.Now(), cpuTime(b)-cpu0
	rt := counter.snapshot()
	// The ticks measured are those in [from, to − 2s]: a run of one of them that has not
	// started by to is later than any reported here, and counted as a miss.
	last := to.Add(-2 * time.Second)
	mu.Lock()
	measured := slices.DeleteFunc(slices.Clone(ledger), func(r ran) bool { return r.tick.Before(from) || r.tick.After(last) })
	mu.Unlock()

	count := map[int]map[int64]int{} // job → tick (unix ms) → runs
	byInstant := map[int64][]time.Duration{}
	var dispatch, started []time.Duration
	for _, r := range measured {
		t := r.tick.UnixMilli()
		if count[r.job] == nil {
			count[r.job] = map[int64]int{}
		}
		count[r.job][t]++
		dispatch = append(dispatch, r.dispatch)
		started = append(started, r.start)
		byInstant[t] = append(byInstant[t], r.start)
	}
	var ticks, missed, dups int
	for i := range jobs {
		sched, err := scheduler.ParseSpec(spec(i), time.UTC)
		require.NoError(b, err)
		for t := sched.Next(from.Add(-time.Nanosecond)); !t.After(last); t = sched.Next(t) {
			ticks++
			switch n := count[i][t.UnixMilli()]; {
			case n == 0:
				missed++
			case n > 1:
				dups += n - 1
			}
		}
	}
	n := int64(len(measured))
	slices.Sort(dispatch)
	slices.Sort(started)
	var p99s, maxes []time.Duration
	for _, l := range byInstant {
		slices.Sort(l)
		p99s = append(p99s, percentile(l, 0.99))
		maxes = append(maxes, l[len(l)-1])
	}
	slices.Sort(p99s)
	slices.Sort(maxes)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(n)/to.Sub(from).Seconds(), "runs/s")
	b.ReportMetric(float64(ticks), "ticks")
	b.ReportMetric(float64(missed), "missed")
	b.ReportMetric(float64(dups), "duplicates")
	b.ReportMetric(float64(len(byInstant)), "instants")
	b.ReportMetric(ms(percentile(dispatch, 0.50)), "dispatch-p50-ms")
	b.ReportMetric(ms(percentile(dispatch, 0.99)), "dispatch-p99-ms")
	b.ReportMetric(ms(percentile(started, 0.50)), "start-p50-ms")
	b.ReportMetric(ms(percentile(started, 0.99)), "start-p99-ms")
	b.ReportMetric(ms(percentile(started, 1)), "start-max-ms")
	b.ReportMetric(ms(percentile(p99s, 0.5)), "instant-p99-median-ms")
	b.ReportMetric(ms(percentile(p99s, 1)), "instant-p99-worst-ms")
	b.ReportMetric(ms(percentile(maxes, 1)), "instant-max-worst-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(n, 1)), "cpu-µs/run")
	perNodeRun := func(v int64) float64 { return float64(v) / float64(max(n, 1)) / float64(len(c.Servers)) }
	for name, v := range rt {
		if d := v - rt0[name]; d > 0 {
			b.ReportMetric(perNodeRun(d), name+"/node/run")
		}
	}
	b.ReportMetric(float64(addTime.Microseconds())/float64(jobs*replicas), "add-µs/job")
	b.ReportMetric(0, "ns/op") // wall time per op is the 1s of each iteration: meaningless
}

// 10,000 jobs, each once a minute, spread over the seconds: 167 due at each second.
func BenchmarkScheduler10kJobsEveryMinute(b *testing.B) {
	benchScheduler(b, 1, 10000, 500, func(i int) string { return fmt.Sprintf("%d * * * * *", i%60) })
}

// 10,000 jobs, each every 10 seconds, spread over the seconds: 1,000 due at each second.
func BenchmarkScheduler10kJobs(b *testing.B) {
	benchScheduler(b, 1, 10000, 30000, func(i int) string { return fmt.Sprintf("%d/10 * * * * *", i%10) })
}

// 10,000 jobs that all fire at the same instant, every 10 seconds: the worst burst.
func BenchmarkScheduler10kJobsBurst(b *testing.B) {
	benchScheduler(b, 1, 10000, 20000, func(int) string { return "@every 10s" })
}

// Jobs that all fire at the same instant, every 10 seconds, on three replicas that race for
// every tick (issue 15 §3): 100, 1,000 and 10,000 jobs. The warm-up is two instants, so every
// tick measured is contended and its fencing counters have converged.
func BenchmarkSchedulerBurst3Replicas(b *testing.B) {
	for _, jobs := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprint("jobs=", jobs), func(b *testing.B) {
			benchScheduler(b, 3, jobs, 2*jobs, func(int) string { return "@every 10s" })
		})
	}
}

// 10,000 jobs every 10 seconds spread over the seconds (1,000 due at each second), on three
// replicas: a steady rate of 1,000 runs a second.
func BenchmarkSchedulerSpread3Replicas(b *testing.B) {
	benchScheduler(b, 3, 10000, 20000, func(i int) string { return fmt.Sprintf("%d/10 * * * * *", i%10) })
}
