package e2e

// Three replicas of a worker, on three real Redis nodes, export their traces over OTLP/HTTP to
// a real Jaeger; the test reads them back from Jaeger's query API and checks what a user would
// look for: per tick, one run and skips that link to it; every lock attempt; and a lost lease.

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/internal/faultproxy"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// jaegerEnv names the Jaeger binary the test runs.
const jaegerEnv = "CRONLOCK_JAEGER"

const (
	ticksWanted = 3 // ticks seen by all three replicas
	reportJob   = "e2e-report"
	leaseJob    = "e2e-lease"
)

func TestJaeger(t *testing.T) {
	bin := os.Getenv(jaegerEnv)
	if bin == "" {
		t.Skipf("%s is not set: build Jaeger with scripts/jaeger.sh (a few minutes the first time, cached after) and run with %s=$(scripts/jaeger.sh); .ci/run does", jaegerEnv, jaegerEnv)
	}
	began := time.Now()
	jg := startJaeger(t, bin)
	service := fmt.Sprintf("cronlock-e2e-%d", began.UnixNano())
	servers := redistest.StartN(t, 3, redistest.Config{})
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr())
	}

	w := &world{t: t, jaeger: jg, service: service, ran: map[int64]string{}, leaseDone: make(chan struct{})}
	// Three replicas race for each tick of the report job.
	for i := range 3 {
		w.replica(fmt.Sprint("replica-", i+1), addrs, job.Job{Name: reportJob, Spec: "@every 1s", Handler: w.report})
	}
	// A fourth replica runs a job whose nodes it loses while it runs: its lease is lost.
	var proxies []*faultproxy.Proxy
	var proxied []string
	for _, a := range addrs {
		p := faultproxy.Start(t, a)
		proxies = append(proxies, p)
		proxied = append(proxied, p.Addr())
	}
	w.replica("replica-lease", proxied, job.Job{Name: leaseJob, Spec: "@every 1s", Options: job.Options{LockTTL: time.Second},
		Handler: func(ctx context.Context) error { return w.loseLease(ctx, proxies) }})

	for _, s := range w.scheds {
		require.NoError(t, s.Start())
	}
	require.Eventually(t, func() bool { return w.done() }, time.Minute, 20*time.Millisecond, "the schedulers did not run %d ticks and lose a lease", ticksWanted+1)
	w.stop()
	w.assertJaeger(began)
	t.Logf("checked %d tick spans in Jaeger in %v", len(w.recorded(spanTick)), time.Since(began).Round(time.Millisecond))
}

const spanTick = "cronlock.tick"

// world is the cluster under test.
type world struct {
	t       *testing.T
	jaeger  *jaeger
	service string

	scheds    []*scheduler.Scheduler
	providers []*sdktrace.TracerProvider
	recorders []*tracetest.SpanRecorder // what each replica exported
	closers   []func()

	mu        sync.Mutex
	ran       map[int64]string // tick (Unix ms) → replica that ran it
	leaseOnce sync.Once
	leaseDone chan struct{}
}

// replica builds one replica: its own lock client, tracer provider (OTLP/HTTP to Jaeger, and a
// recorder of what it exported) and scheduler with Trace outermost.
func (w *world) replica(name string, addrs []string, j job.Job) {
	t := w.t
	var nodes []redlock.Node
	for _, a := range addrs {
		rc := redis.NewClient(&redis.Options{Addr: a, ContextTimeoutEnabled: true, MaxRetries: -1})
		w.closers = append(w.closers, func() { _ = rc.Close() })
		nodes = append(nodes, rc)
	}
	locks, err := redlock.New(nodes)
	require.NoError(t, err)
	w.closers = append(w.closers, func() { _ = locks.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, locks.EndQuarantine(ctx))

	httpClient := &http.Client{Transport: &http.Transport{}}
	w.closers = append(w.closers, httpClient.CloseIdleConnections)
	exp, err := otlptracehttp.New(context.Background(),
		otlptracehttp.WithEndpoint(w.jaeger.OTLP), otlptracehttp.WithInsecure(), otlptracehttp.WithHTTPClient(httpClient))
	require.NoError(t, err)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(100*time.Millisecond)),
		sdktrace.WithSpanProcessor(rec),
		sdktrace.WithResource(resource.NewSchemaless(
			attribute.String("service.name", w.service),
			attribute.String("service.instance.id", name),
		)),
	)
	s, err := scheduler.New(locks, scheduler.WithReplica(name), scheduler.WithMiddleware(middleware.Trace(middleware.WithTracerProvider(tp))))
	require.NoError(t, err)
	require.NoError(t, s.Add(j))
	w.scheds = append(w.scheds, s)
	w.providers = append(w.providers, tp)
	w.recorders = append(w.recorders, rec)
	t.Cleanup(func() { // in case the test fails before stop
		_ = s.Stop(context.Background())
		_ = tp.Shutdown(context.Background())
	})
}

// report is the report job: some work, and a note of which replica ran which tick.
func (w *world) report(ctx context.Context) error {
	r, _ := job.RunFrom(ctx)
	w.mu.Lock()
	if prev, dup := w.ran[r.Tick.UnixMilli()]; dup {
		w.t.Errorf("tick %v ran on %s and %s", r.Tick, prev, r.Replica)
	}
	w.ran[r.Tick.UnixMilli()] = r.Replica
	w.mu.Unlock()
	select {
	case <-time.After(50 * time.Millisecond):
	case <-ctx.Done():
	}
	return nil
}

// loseLease cuts the replica off from every node the first time it runs, and waits for its
// context: the lease cannot be renewed, and is lost.
func (w *world) loseLease(ctx context.Context, proxies []*faultproxy.Proxy) error {
	first := false
	w.leaseOnce.Do(func() { first = true })
	if !first {
		return nil
	}
	for _, p := range proxies {
		p.Blackhole(true)
	}
	<-ctx.Done()
	for _, p := range proxies {
		p.Blackhole(false)
	}
	close(w.leaseDone)
	return context.Cause(ctx)
}

// done reports whether ticksWanted ticks were fired by all three report replicas, one more
// ran (so those are over), and the lease was lost.
func (w *world) done() bool {
	select {
	case <-w.leaseDone:
	default:
		return false
	}
	w.mu.Lock()
	ran := len(w.ran)
	w.mu.Unlock()
	return ran > ticksWanted && len(w.fullTicks()) >= ticksWanted
}

// fullTicks returns the ticks of the report job for which every report replica exported a
// tick span.
func (w *world) fullTicks() []string {
	per := map[string]int{}
	for _, s := range w.recorded(spanTick) {
		if attrOf(s.Attributes(), "cronlock.job") == reportJob {
			per[attrOf(s.Attributes(), "cronlock.tick")]++
		}
	}
	var full []string
	for tick, n := range per {
		if n == 3 {
			full = append(full, tick)
		}
	}
	return full
}

func (w *world) recorded(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, r := range w.recorders {
		for _, s := range r.Ended() {
			if s.Name() == name {
				out = append(out, s)
			}
		}
	}
	return out
}

func attrOf(kvs []attribute.KeyValue, key string) string {
	for _, kv := range kvs {
		if string(kv.Key) == key {
			return kv.Value.String()
		}
	}
	return ""
}

// stop stops the schedulers (each waits for its runs) and flushes every span to Jaeger.
func (w *world) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range w.scheds {
		require.NoError(w.t, s.Stop(ctx))
	}
	for _, tp := range w.providers {
		require.NoError(w.t, tp.Shutdown(ctx), "flushing spans to Jaeger")
	}
	for _, c := range slices.Backward(w.closers) {
		c()
	}
}

// assertJaeger reads the traces back from Jaeger and checks them.
func (w *world) assertJaeger(began time.Time) {
	t := w.t
	want := len(w.recorded(spanTick))
	var traces []jTrace
	var ticks []jSpan
	require.Eventually(t, func() bool { // Jaeger stores what it received asynchronously
		var err error
		traces, err = w.jaeger.traces(context.Background(), w.service, spanTick, began.Add(-time.Minute), time.Now().Add(time.Minute))
		if err != nil {
			t.Log(err)
			return false
		}
		ticks = ticks[:0]
		for _, tr := range traces {
			for _, s := range tr.Spans {
				if s.OperationName == spanTick {
					ticks = append(ticks, s)
				}
			}
		}
		return len(ticks) == want
	}, 30*time.Second, 100*time.Millisecond, "Jaeger has %d of the %d tick spans exported", len(ticks), want)

	spans := map[string][]jSpan{} // trace id → its spans
	for _, tr := range traces {
		spans[tr.TraceID] = tr.Spans
	}
	children := func(parent jSpan, name string) []jSpan {
		var out []jSpan
		for _, s := range spans[parent.TraceID] {
			if s.OperationName == name && slices.ContainsFunc(s.References, func(r jRef) bool {
				return r.RefType == "CHILD_OF" && r.SpanID == parent.SpanID
			}) {
				out = append(out, s)
			}
		}
		slices.SortFunc(out, func(a, b jSpan) int { return cmp.Compare(a.StartTime, b.StartTime) })
		return out
	}

	// The report job: per tick, exactly one run; every other replica skipped it, linked to it.
	byTick := map[string][]jSpan{}
	for _, s := range ticks {
		if tag(s.Tags, "cronlock.job") == reportJob {
			byTick[tag(s.Tags, "cronlock.tick")] = append(byTick[tag(s.Tags, "cronlock.tick")], s)
		}
	}
	// A tick still under way when the schedulers stopped ends as stopped on the replicas that
	// were still attempting it (Stop gives up their waits; seen beside a CPU hog): the test cut
	// it short, so it is not checked. Only a tick after every checked one may be cut (ticks
	// come every second, and the previous one may still be ending).
	var cut, kept []int64
	for tick, group := range byTick {
		if slices.ContainsFunc(group, func(s jSpan) bool { return tag(s.Tags, "cronlock.outcome") == "stopped" }) {
			cut = append(cut, mustInt(t, tick))
			delete(byTick, tick)
		} else {
			kept = append(kept, mustInt(t, tick))
		}
	}
	for _, c := range cut {
		require.NotEmpty(t, kept)
		assert.GreaterOrEqual(t, c, slices.Max(kept)-time.Second.Milliseconds(), "tick %d ended as stopped before the last ticks checked %v", c, kept)
		t.Logf("tick %d was under way when the schedulers stopped: not checked", c)
	}
	full := 0
	for tick, group := range byTick {
		if len(group) == 3 {
			full++
		}
		var ran []jSpan
		for _, s := range group {
			if tag(s.Tags, "cronlock.outcome") == "ran" {
				ran = append(ran, s)
			}
		}
		require.Len(t, ran, 1, "tick %s: one run; outcomes %v", tick, outcomes(group))
		holder := ran[0]
		assert.Equal(t, w.ran[mustInt(t, tick)], tag(holder.Tags, "cronlock.replica"), "tick %s: the replica that ran it", tick)
		// The run's trace: its attempt, run and release.
		att := children(holder, "cronlock.lock.acquire")
		require.NotEmpty(t, att, "tick %s: attempt spans of the run", tick)
		last := att[len(att)-1]
		assert.Equal(t, "acquired", tag(last.Tags, "cronlock.lock.result"), "tick %s", tick)
		assert.NotEmpty(t, tag(last.Tags, "cronlock.fencing_token"), "tick %s", tick)
		assert.Equal(t, "2", tag(last.Tags, "cronlock.lock.quorum"), "tick %s", tick)
		assert.Len(t, children(holder, "cronlock.job.run"), 1, "tick %s", tick)
		assert.Len(t, children(holder, "cronlock.lock.release"), 1, "tick %s", tick)

		// Every skip links to the span of the replica it found holding the tick. That is the
		// run's span, or — when the replicas split the vote at the tick instant and this one
		// was refused by a racer that did not win — the racer's span, itself a skip linking
		// on: following the links always leads to the run.
		bySpan := map[string]jSpan{}
		for _, s := range group {
			bySpan[s.SpanID] = s
		}
		for _, s := range group {
			if s.SpanID == holder.SpanID {
				continue
			}
			replica := tag(s.Tags, "cronlock.replica")
			assert.Contains(t, []string{"skipped_held", "skipped_done"}, tag(s.Tags, "cronlock.outcome"), "tick %s", tick)
			hops, at := 0, s
			for at.SpanID != holder.SpanID && hops < len(group) {
				link, ok := followsFrom(at)
				if !assert.True(t, ok, "tick %s: the skip of %s links to a span; references %v", tick, tag(at.Tags, "cronlock.replica"), at.References) {
					break
				}
				next, ok := bySpan[link.SpanID]
				if !assert.True(t, ok, "tick %s: %s links to %v, not a tick span of the tick", tick, tag(at.Tags, "cronlock.replica"), link) {
					break
				}
				assert.Equal(t, tag(next.Tags, "cronlock.replica"), tag(at.Tags, "cronlock.holder"), "the link goes to the holder")
				at, hops = next, hops+1
			}
			assert.Equal(t, holder.SpanID, at.SpanID, "tick %s: the links from the skip of %s lead to the run", tick, replica)
			if hops > 1 {
				t.Logf("tick %s: the skip of %s reaches the run in %d links (a split vote)", tick, replica, hops)
			}
			sa := children(s, "cronlock.lock.acquire")
			require.NotEmpty(t, sa, "tick %s: attempt spans of a skip", tick)
			assert.Contains(t, []string{"held", "done"}, tag(sa[len(sa)-1].Tags, "cronlock.lock.result"))
			assert.Empty(t, children(s, "cronlock.job.run"), "a skip has no run")
		}
	}
	assert.GreaterOrEqual(t, full, ticksWanted, "ticks seen by all three replicas")

	// The lease that was lost.
	var lost []jSpan
	for _, s := range ticks {
		if tag(s.Tags, "cronlock.job") == leaseJob && tag(s.Tags, "cronlock.outcome") == "lease_lost" {
			lost = append(lost, s)
		}
	}
	require.Len(t, lost, 1, "one lease_lost tick")
	assert.Equal(t, "true", tag(lost[0].Tags, "error"))
	run := children(lost[0], "cronlock.job.run")
	require.Len(t, run, 1)
	var events []string
	var cause string
	for _, l := range run[0].Logs {
		events = append(events, tag(l.Fields, "event"))
		if tag(l.Fields, "event") == "cronlock.lease.lost" {
			cause = tag(l.Fields, "cronlock.cause")
		}
	}
	assert.Contains(t, events, "cronlock.lease.renewal_failed")
	assert.Contains(t, events, "cronlock.lease.lost")
	assert.Contains(t, cause, "lease lost")
}

// followsFrom returns the span link (FOLLOWS_FROM reference) of a tick span.
func followsFrom(s jSpan) (jRef, bool) {
	for _, r := range s.References {
		if r.RefType == "FOLLOWS_FROM" {
			return r, true
		}
	}
	return jRef{}, false
}

func outcomes(spans []jSpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, tag(s.Tags, "cronlock.replica")+"="+tag(s.Tags, "cronlock.outcome"))
	}
	return out
}

func mustInt(t *testing.T, s string) int64 {
	var n int64
	_, err := fmt.Sscan(strings.TrimSpace(s), &n)
	require.NoError(t, err)
	return n
}
