package scheduler

// The loop alone, without locks: the jobs' handler chains are replaced by one that records
// the dispatch, so no request reaches a lock node. This isolates what the scheduler itself
// costs per tick (next-tick computation, heap, goroutine) from what the lock costs (measured
// with real nodes in bench_test.go).

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

func BenchmarkLoop10kJobsEverySecond(b *testing.B) {
	// A node that is never dialled: every handler is replaced below.
	rc := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true})
	defer rc.Close()
	lc, err := redlock.New([]redlock.Node{rc})
	if err != nil {
		b.Fatal(err)
	}
	defer lc.Close()
	s, err := New(lc)
	if err != nil {
		b.Fatal(err)
	}
	const jobs = 10000
	for i := range jobs {
		if err := s.Add(job.Job{Name: fmt.Sprint("job-", i), Spec: "@every 1s", Handler: func(context.Context) error { return nil }}); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	var late []time.Duration
	measuring := false
	record := func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		d := time.Since(r.Tick)
		mu.Lock()
		if measuring {
			late = append(late, d)
		}
		mu.Unlock()
		return nil
	}
	for _, e := range s.entries {
		e.handler = record
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	time.Sleep(1500 * time.Millisecond)
	mu.Lock()
	measuring = true
	mu.Unlock()
	cpu0 := cpuTime()
	b.ResetTimer()
	for range b.N {
		time.Sleep(time.Second)
	}
	b.StopTimer()
	mu.Lock()
	measuring = false
	n := len(late)
	slices.Sort(late)
	mu.Unlock()
	cpu := cpuTime() - cpu0
	_ = s.Stop(context.Background())
	p := func(q float64) float64 {
		return float64(late[min(n-1, int(float64(n)*q))]) / float64(time.Millisecond)
	}
	b.ReportMetric(float64(n)/float64(b.N), "ticks/s")
	b.ReportMetric(p(0.50), "dispatch-p50-ms")
	b.ReportMetric(p(0.99), "dispatch-p99-ms")
	b.ReportMetric(p(1), "dispatch-max-ms")
	b.ReportMetric(float64(cpu.Nanoseconds())/1000/float64(n), "cpu-µs/tick")
	b.ReportMetric(0, "ns/op")
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
