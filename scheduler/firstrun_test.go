package scheduler_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// logSink is an io.Writer that keeps what a logger wrote and lets a test wait for a line.
type logSink struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{}
}

func newLogSink() *logSink { return &logSink{changed: make(chan struct{})} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.changed)
	s.changed = make(chan struct{})
	return s.buf.Write(p)
}

// waitLine waits until a written line contains sub, and returns that line.
func (s *logSink) waitLine(t testing.TB, sub string) string {
	t.Helper()
	limit := time.After(waitLimit)
	for {
		s.mu.Lock()
		for line := range strings.Lines(s.buf.String()) {
			if strings.Contains(line, sub) {
				s.mu.Unlock()
				return line
			}
		}
		changed := s.changed
		s.mu.Unlock()
		select {
		case <-changed:
		case <-limit:
			s.mu.Lock()
			defer s.mu.Unlock()
			t.Fatalf("no log line with %q; the log:\n%s", sub, s.buf.String())
		}
	}
}

// A first deployment on new nodes, without EndQuarantine: the nodes are in quarantine, no
// tick runs, and the scheduler says why and how to end it — on slog.Default(), since no
// WithLogger was given.
func TestFreshNodesLogTheQuarantine(t *testing.T) {
	c := newCluster(t, 3, false)
	var nodes []redlock.Node
	for _, s := range c.Servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
		t.Cleanup(func() { _ = rc.Close() })
		nodes = append(nodes, rc)
	}
	locks, err := redlock.New(nodes, redlock.WithNodeTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(func() { _ = locks.Close() })

	sink := newLogSink()
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(sink, &slog.HandlerOptions{Level: slog.LevelWarn})))
	t.Cleanup(func() { slog.SetDefault(prev) })

	s := newScheduler(t, locks)
	require.NoError(t, s.Add(job.Job{Name: "first", Spec: "@every 300ms", Options: job.Options{LockTTL: time.Second}, Handler: nop}))
	require.NoError(t, s.Start())

	line := sink.waitLine(t, "outcome="+outcome.QuorumUnavailable)
	assert.Contains(t, line, "level=WARN")
	assert.Contains(t, line, "in quarantine")
	assert.Contains(t, line, "(*redlock.Client).EndQuarantine")
	assert.Contains(t, line, "cronlock check --end-quarantine")
}
