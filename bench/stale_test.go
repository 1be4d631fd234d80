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

// TestStaleLocksAfterRelease documents why the uncontended benchmarks do not reuse a key at
// once (see the README). It does not fail: it logs how many released locks stayed behind on
// some node, and how often a TryAcquire right after the Release of the same key was refused,
// the holder being the caller itself.
//
//	go test -run TestStaleLocksAfterRelease -v
func TestStaleLocksAfterRelease(t *testing.T) {
	const rounds = 3000
	c := newCluster(t, 5, false)
	lk := newLocker(t, "cronlock", c).(*cronlockLocker)
	rcs := c.redisClients(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Distinct keys: every lock is released, yet some stay on a node for their whole TTL.
	base := redistest.Key(t)
	for i := range rounds {
		if err := lk.tryLock(ctx, base+":"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
		if err := lk.unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond) // every request has landed
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
		t.Logf("node %d: %d of %d released locks still held", i, stale, rounds)
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
	t.Logf("same key: %d of %d TryAcquire calls right after a Release were refused", refused, rounds)
}
