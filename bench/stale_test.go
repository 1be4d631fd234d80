package bench

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// TestStaleLocksAfterRelease checks what lets the uncontended benchmarks reuse a key (see the
// README): a released lock stays on no node, not even on the nodes whose acquisition request
// answered after the Release, and a TryAcquire right after the Release of the same key is never
// refused.
//
//	go test -run TestStaleLocksAfterRelease -v
func TestStaleLocksAfterRelease(t *testing.T) {
	const rounds = 3000
	c := newCluster(t, 5, false)
	lk := newLocker(t, "cronlock", c).(*cronlockLocker)
	rcs := c.redisClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Distinct keys: every lock is released, and none may stay on a node for its TTL.
	dl := newLocker(t, "cronlock", c).(*cronlockLocker)
	base := redistest.Key(t)
	for i := range rounds {
		if err := dl.tryLock(ctx, base+":"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if err := dl.unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	_ = dl.c.Close() // waits for the requests still running: every request has landed
	for i, rc := range rcs {
		keys, err := rc.Keys(ctx, base+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		stale := 0
		for _, k := range keys {
			if !strings.HasSuffix(k, ":fence") {
				stale++
			}
		}
		if stale != 0 {
			t.Errorf("node %d: %d of %d released locks still held", i, stale, rounds)
		}
	}

	// One key, acquired again as soon as it was released.
	key := redistest.Key(t)
	refused := 0
	for range rounds {
		err := lk.tryLock(ctx, key)
		if errors.Is(err, redlock.ErrNotAcquired) {
			refused++
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if refused != 0 {
		t.Errorf("same key: %d of %d TryAcquire calls right after a Release were refused", refused, rounds)
	}
}
