package nodes

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// go-redis logs the failures of its connection pools (a node that refuses connections) with
// its own global logger, once per dial attempt. The daemon sends them to its log instead, at
// warn level, each kind at most once per redisLogEvery with the count of those left out.

const redisLogEvery = 10 * time.Second

var (
	redisLogOnce sync.Once
	redisLogger  atomic.Pointer[slog.Logger]
	redisLogMu   sync.Mutex
	redisLogSeen = map[string]*redisLogKind{}
)

type redisLogKind struct {
	last    time.Time
	dropped int
}

// LogRedisTo sends go-redis's own log to l (nil: discard it), with fresh rate limits.
func LogRedisTo(l *slog.Logger) {
	redisLogMu.Lock()
	clear(redisLogSeen)
	redisLogMu.Unlock()
	redisLogger.Store(l)
	redisLogOnce.Do(func() { redis.SetLogger(redisLog{}) })
}

type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, args ...any) {
	l := redisLogger.Load()
	if l == nil {
		return
	}
	redisLogMu.Lock()
	k := redisLogSeen[format]
	if k == nil {
		k = &redisLogKind{}
		redisLogSeen[format] = k
	}
	now := time.Now()
	if now.Sub(k.last) < redisLogEvery {
		k.dropped++
		redisLogMu.Unlock()
		return
	}
	dropped := k.dropped
	k.last, k.dropped = now, 0
	redisLogMu.Unlock()
	attrs := []any{}
	if dropped > 0 {
		attrs = append(attrs, "similar_messages_left_out", dropped)
	}
	l.WarnContext(ctx, fmt.Sprintf(format, args...), attrs...)
}
