package redlock_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// TestFencingTokensStrictlyIncrease is a property test: over a random (seeded) schedule of
// node kills and restarts without persistence, so that nodes miss acquisitions and come back
// with empty memory, every successful acquisition's token is greater than every token issued
// before it from the same fence counter. The locks are on distinct keys that share the default
// counters: three keys without a hash tag (DefaultFenceKey) and two with one tag. Replay a
// failing schedule with CRONLOCK_SEED=<seed>.
func TestFencingTokensStrictlyIncrease(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("CRONLOCK_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (replay: CRONLOCK_SEED=%d go test -run %s ./redlock)", seed, seed, t.Name())
	rng := rand.New(rand.NewPCG(seed, seed))

	const n = 5
	c := newCluster(t, n, false)
	// A short max TTL keeps restarted nodes' quarantine short.
	lc := c.client(t, redlock.WithMaxTTL(300*time.Millisecond), redlock.WithNodeTimeout(100*time.Millisecond))
	ctx := ctxT(t)
	base := redistest.Key(t)
	keys := []string{base + ":a", base + ":b", base + ":c", "{" + base + "}:d", "{" + base + "}:e"}
	counterOf := func(key string) string {
		if key[0] == '{' {
			return "{" + base + "}:fence"
		}
		return redlock.DefaultFenceKey
	}

	last := map[string]uint64{} // by fence counter
	down := map[int]bool{}
	issued, restarts := 0, 0
	steps := 150
	if testing.Short() {
		steps = 40
	}
	// Past the planned steps, go on (up to as many again) until a node restarted and a token
	// was issued after it: the test is about tokens across restarts.
	issuedAfterRestart := 0
	for step := 0; step < steps || (restarts == 0 || issuedAfterRestart == 0) && step < 2*steps; step++ {
		switch r := rng.IntN(10); {
		case r < 2 && len(down) < n/2:
			i := rng.IntN(n)
			if !down[i] {
				require.NoError(t, c.servers[i].Kill())
				down[i] = true
			}
		case r < 4 && len(down) > 0:
			for i := range down {
				require.NoError(t, c.servers[i].Restart()) // empty: no persistence
				delete(down, i)
				restarts++
				break
			}
		default:
			key := keys[rng.IntN(len(keys))]
			l, err := lc.TryAcquire(ctx, key, 200*time.Millisecond)
			if err != nil {
				// Quarantined or down nodes may leave no quorum for a moment, and a lock left
				// to expire is still held.
				if !errors.Is(err, redlock.ErrQuorumUnavailable) {
					require.ErrorIs(t, err, redlock.ErrNotAcquired)
				}
				continue
			}
			fence := counterOf(key)
			require.Greater(t, l.Token(), last[fence], "token of %s went backwards on counter %s (seed %d)", key, fence, seed)
			last[fence] = l.Token()
			issued++
			if restarts > 0 {
				issuedAfterRestart++
			}
			if rng.IntN(2) == 0 { // else it expires
				require.NoError(t, l.Release(ctx))
			}
		}
	}
	t.Logf("%d tokens issued over %d restarts with empty memory, %d after the first", issued, restarts, issuedAfterRestart)
	require.Positive(t, restarts, "no node restarted (seed %d)", seed)
	require.Positive(t, issuedAfterRestart, "no token issued after a restart (seed %d)", seed)
}

// TestDistinctKeysLeaveBoundedState locks and releases many distinct keys with default options
// and counts the keys left on each node: the boot marker and one fence counter per hash tag
// and for the keys without one, however many keys were locked. Tokens of one counter strictly
// increase, whichever key they were issued for.
func TestDistinctKeysLeaveBoundedState(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t)
	ctx := ctxT(t)
	base := redistest.Key(t)
	n := 1000
	if testing.Short() {
		n = 200
	}
	last := map[string]uint64{}
	for i := range n {
		key, fence := base+":"+strconv.Itoa(i), redlock.DefaultFenceKey
		if i%2 == 0 {
			tag := "{" + base + ":" + strconv.Itoa(i%3) + "}"
			key, fence = tag+":"+strconv.Itoa(i), tag+":fence"
		}
		l, err := lc.TryAcquire(ctx, key, 10*time.Second)
		require.NoError(t, err)
		require.Greater(t, l.Token(), last[fence], "token of %s on counter %s", key, fence)
		last[fence] = l.Token()
		require.NoError(t, l.Release(ctx))
	}
	// Close waits for the requests still running, so every late reply has been handled.
	require.NoError(t, lc.Close())
	want := []string{redlock.DefaultBootKey, redlock.DefaultFenceKey}
	for i := range 3 {
		want = append(want, "{"+base+":"+strconv.Itoa(i)+"}:fence")
	}
	for i, s := range c.servers {
		keys, err := s.Client().Keys(ctx, "*").Result()
		require.NoError(t, err)
		require.ElementsMatch(t, want, keys, "keys left on node %d after %d distinct locks", i, n)
	}
}
