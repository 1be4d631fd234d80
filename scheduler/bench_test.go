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
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// roundTrips counts the commands sent to the nodes (a pipeline counts once), by redlock
// script (named from the SHA-1 of redlock/scripts/*.lua) or command name.
type roundTrips struct {
	names map[string]string // script SHA-1 → file name
	mu    sync.Mutex
	n     map[string]int64
}

func newRoundTrips(b *testing.B) *roundTrips {
	rt := &roundTrips{names: map[string]string{}, n: map[string]int64{}}
	files, err := filepath.Glob("../redlock/scripts/*.lua")
	require.NoError(b, err)
	for _, f := range files {
		src, err := os.ReadFile(f)
		require.NoError(b, err)
		sum := sha1.Sum(src)
		rt.names[hex.EncodeToString(sum[:])] = strings.TrimSuffix(filepath.Base(f), ".lua")
	}
	return rt
}

func (rt *roundTrips) count(name string) {
	rt.mu.Lock()
	rt.n[name]++
	rt.mu.Unlock()
}

func (rt *roundTrips) snapshot() map[string]int64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return maps.Clone(rt.n)
}

func (rt *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (rt *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		name := cmd.Name()
		if args := cmd.Args(); (name == "evalsha" || name == "eval") && len(args) > 1 {
			if script, ok := rt.names[fmt.Sprint(args[1])]; ok {
				name = script
			}
		}
		rt.count(name)
		return next(ctx, cmd)
	}
}

func (rt *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		rt.count("pipeline")
		return next(ctx, cmds)
	}
}

var _ redis.Hook = (*roundTrips)(nil)

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

// benchScheduler runs one replica with jobs jobs on 3 real nodes for b.N seconds after a
// warm-up of warmupRuns runs (scripts loaded; the fencing counters of the nodes, which start
// from each node's clock, converge over the first few runs of each job), and reports, over the measured seconds: the lateness of
// the dispatch (the tick's goroutine entering the handler chain) and of the job's start (after
// its lock was taken), from the scheduled instant; process CPU per run (the scheduler, the
// lock client and go-redis; not redis-server); and round trips per node per run.
func benchScheduler(b *testing.B, jobs, warmupRuns int, spec func(i int) string) {
	c := newCluster(b, 3, false)
	counter := newRoundTrips(b)
	var nodes []redlock.Node
	for _, s := range c.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		rc.AddHook(counter)
		b.Cleanup(func() { _ = rc.Close() })
		nodes = append(nodes, rc)
	}
	lc, err := redlock.New(nodes)
	require.NoError(b, err)
	b.Cleanup(func() { _ = lc.Close() })
	require.NoError(b, lc.EndQuarantine(context.Background()))

	var (
		mu        sync.Mutex
		measuring bool
		dispatch  []time.Duration
		started   []time.Duration
		runs      atomic.Int64
	)
	measure := func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			r, _ := job.RunFrom(ctx)
			late := time.Since(r.Tick)
			mu.Lock()
			if measuring {
				dispatch = append(dispatch, late)
			}
			mu.Unlock()
			return next(ctx)
		}
	}
	handler := func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		late := time.Since(r.Tick)
		mu.Lock()
		if measuring {
			started = append(started, late)
		}
		mu.Unlock()
		runs.Add(1)
		return nil
	}
	s := newScheduler(b, lc, scheduler.WithReplica("bench"), scheduler.WithMiddleware(measure))
	addStart := time.Now()
	for i := range jobs {
		require.NoError(b, s.Add(job.Job{Name: fmt.Sprint("job-", i), Spec: spec(i), Handler: handler}))
	}
	addTime := time.Since(addStart)
	require.NoError(b, s.Start())

	for runs.Load() < int64(warmupRuns) {
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	rt0 := counter.snapshot()
	mu.Lock()
	measuring = true
	mu.Unlock()
	runs0, cpu0 := runs.Load(), cpuTime(b)
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	mu.Lock()
	measuring = false
	mu.Unlock()
	cpu := cpuTime(b) - cpu0
	n := runs.Load() - runs0
	perScript := map[string]int64{}
	var rts int64
	for name, v := range counter.snapshot() {
		perScript[name] = v - rt0[name]
		rts += v - rt0[name]
	}
	mu.Lock()
	slices.Sort(dispatch)
	slices.Sort(started)
	mu.Unlock()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(float64(n)/float64(b.N), "runs/s")
	b.ReportMetric(ms(percentile(dispatch, 0.50)), "dispatch-p50-ms")
	b.ReportMetric(ms(percentile(dispatch, 0.99)), "dispatch-p99-ms")
	b.ReportMetric(ms(percentile(started, 0.50)), "start-p50-ms")
	b.ReportMetric(ms(percentile(started, 0.99)), "start-p99-ms")
	b.ReportMetric(float64(cpu.Microseconds())/float64(max(n, 1)), "cpu-µs/run")
	perNodeRun := func(v int64) float64 { return float64(v) / float64(max(n, 1)) / float64(len(c.Servers)) }
	b.ReportMetric(perNodeRun(rts), "roundtrips/node/run")
	for name, v := range perScript {
		if v > 0 {
			b.ReportMetric(perNodeRun(v), name+"/node/run")
		}
	}
	b.ReportMetric(float64(addTime.Microseconds())/float64(jobs), "add-µs/job")
	b.ReportMetric(0, "ns/op") // wall time per op is the 1s of each iteration: meaningless
}

// 10,000 jobs, each once a minute, spread over the seconds: 167 due at each second.
func BenchmarkScheduler10kJobsEveryMinute(b *testing.B) {
	benchScheduler(b, 10000, 500, func(i int) string { return fmt.Sprintf("%d * * * * *", i%60) })
}

// 10,000 jobs, each every 10 seconds, spread over the seconds: 1,000 due at each second.
func BenchmarkScheduler10kJobs(b *testing.B) {
	benchScheduler(b, 10000, 30000, func(i int) string { return fmt.Sprintf("%d/10 * * * * *", i%10) })
}

// 10,000 jobs that all fire at the same instant, every 10 seconds: the worst burst.
func BenchmarkScheduler10kJobsBurst(b *testing.B) {
	benchScheduler(b, 10000, 20000, func(int) string { return "@every 10s" })
}
