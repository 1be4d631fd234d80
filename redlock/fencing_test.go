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
// with empty memory, every successful acquisition's token is greater than every token before
// it. Replay a failing schedule with CRONLOCK_SEED=<seed>.
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
	key := redistest.Key(t)

	var last uint64
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
			l, err := lc.TryAcquire(ctx, key, 200*time.Millisecond)
			if err != nil {
				// Quarantined or down nodes may leave no quorum for a moment, and a lock left
				// to expire is still held.
				if !errors.Is(err, redlock.ErrQuorumUnavailable) {
					require.ErrorIs(t, err, redlock.ErrNotAcquired)
				}
				continue
			}
			require.Greater(t, l.Token(), last, "token went backwards (seed %d)", seed)
			last = l.Token()
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
