package redlock_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// TestFencingTokensStrictlyIncrease is a property test: over a random (seeded) schedule of
// node kills and restarts without persistence, so that nodes miss acquisitions and come back
// with empty memory, every successful acquisition's token is greater than every token issued
// before it from the same fence counter. The locks are on distinct keys that share the default
// counters: three keys without a hash tag (layout.FenceKey) and two with one tag. Replay a
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
		return layout.FenceKey
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
	// What is left does not depend on the node timeout, but a request that outlives a short
	// one on a loaded machine leaves its node's lock to the TTL: give every request time.
	lc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
	ctx := ctxT(t)
	base := redistest.Key(t)
	n := 1000
	if testing.Short() {
		n = 200
	}
	last := map[string]uint64{}
	for i := range n {
		key, fence := base+":"+strconv.Itoa(i), layout.FenceKey
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
	want := []string{layout.BootKey, layout.FenceKey}
	for i := range 3 {
		want = append(want, "{"+base+":"+strconv.Itoa(i)+"}:fence")
	}
	for i, s := range c.servers {
		keys, err := s.Client().Keys(ctx, "*").Result()
		require.NoError(t, err)
		require.ElementsMatch(t, want, keys, "keys left on node %d after %d distinct locks", i, n)
	}
}

// fenceHook is a go-redis hook on one node for the fencing tests: it fails the acquire script
// of the locks in fail without sending it, and holds back the reply of the locks in hold until
// the gate is closed (reporting on held once the script ran).
type fenceHook struct {
	acquire string // the script's SHA
	fail    map[string]bool
	hold    map[string]bool
	gate    chan struct{}
	held    chan struct{}
}

func (h *fenceHook) trip(cmds []redis.Cmder, send func() error) error {
	for _, cmd := range cmds {
		args := cmd.Args()
		if cmd.Name() != "evalsha" || len(args) < 4 || args[1] != h.acquire {
			continue
		}
		for _, a := range args[3:] {
			key, _ := a.(string)
			switch {
			case h.fail[key]:
				cmd.SetErr(redis.ErrClosed) // as a request that never reached the node
				return redis.ErrClosed
			case h.hold[key]:
				err := send()
				h.held <- struct{}{}
				<-h.gate
				return err
			}
		}
	}
	return send()
}

// What a token promises, pinned down with two locks on distinct keys that share one counter.
// Lock a is taken while lock b's acquisition is under way: b's script ran on nodes 1 and 2
// before a's (node 0 failed it), a took nodes 0 and 1 (node 2 failed it), and b's replies come
// in after a returned. The nodes' counters started apart, as after missed acquisitions or a
// memory loss: b got a token equal to a's, or lower, although it returned later. Tokens of
// overlapping acquisitions are thus in no order, and not unique; an acquisition that starts
// after both returned gets a token greater than both, even on nodes 1 and 2, the quorum that a
// missed (a's token was written back to a quorum before a returned).
func TestFencingTokensOfOverlappingAcquisitions(t *testing.T) {
	for _, tc := range []struct {
		name     string
		counters [3]int // on nodes 0, 1, 2 before the two locks
		compare  func(t require.TestingT, a, b any, args ...any)
	}{
		{"equal", [3]int{2000, 1000, 2000}, require.Equal},
		{"lower", [3]int{2000, 1000, 1000}, require.Greater},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, 3, false)
			lc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
			ctx := ctxT(t)
			tag := "{" + redistest.Key(t) + "}"
			a, b, later := tag+":a", tag+":b", tag+":later"
			// The nodes cache the script first: the hooks look at EVALSHAs. (Not with an
			// acquisition: its token's write-back to a node outside the quorum may land after it
			// returned, over a counter set below — seen beside a CPU hog.)
			src, err := os.ReadFile("scripts/acquire.lua")
			require.NoError(t, err)
			for _, s := range c.servers {
				require.NoError(t, s.Client().ScriptLoad(ctx, string(src)).Err())
			}
			gate := make(chan struct{})
			open := sync.OnceFunc(func() { close(gate) })
			t.Cleanup(open) // before the client's Close, which waits for the held replies
			hooks := make([]*fenceHook, 3)
			for i, n := range c.nodes {
				hooks[i] = &fenceHook{acquire: scriptSHA(t, "acquire.lua"), gate: gate, held: make(chan struct{}, 1),
					fail: map[string]bool{}, hold: map[string]bool{}}
				n.(*redis.Client).AddHook(onTrip(hooks[i].trip))
				require.NoError(t, c.servers[i].Client().Set(ctx, tag+":fence", tc.counters[i], 0).Err())
			}
			hooks[0].fail[b], hooks[1].hold[b], hooks[2].hold[b] = true, true, true
			hooks[2].fail[a] = true
			hooks[0].fail[later] = true // the quorum that a missed

			bDone := make(chan *redlock.Lock, 1)
			go func() {
				l, err := lc.TryAcquire(ctx, b, 10*time.Second)
				assert.NoError(t, err)
				bDone <- l
			}()
			<-hooks[1].held
			<-hooks[2].held
			la, err := lc.TryAcquire(ctx, a, 10*time.Second)
			require.NoError(t, err)
			open()
			lb := <-bDone
			require.NotNil(t, lb)
			tc.compare(t, la.Token(), lb.Token(), "a's token, then b's (returned later)")

			la2, err := lc.TryAcquire(ctx, later, 10*time.Second)
			require.NoError(t, err)
			require.Greater(t, la2.Token(), max(la.Token(), lb.Token()), "a later acquisition's token is above both")
			for _, l := range []*redlock.Lock{la, lb, la2} {
				require.NoError(t, l.Release(ctx))
			}
		})
	}
}

// A holder's successor gets a greater token even when its attempt was on its way before the
// holder's token was written back, and the hold was short. The counters start apart, as after
// missed acquisitions: nodes 0, 1, 2 at 1000, 500, 500. b's attempt takes node 2 (501), fails
// on node 0 and reaches node 1 only later. a takes nodes 0 and 1 (node 2 is b's): its token,
// 1001, is written back to node 2 (after b's script ran there) but not to node 1 (the request
// fails, as one that timed out). a is released; then b's request reaches node 1 and takes it:
// its token is 1002 because a's release raised node 1's counter to a's token — 502 without.
func TestSuccessorOfAShortHoldGetsAGreaterToken(t *testing.T) {
	c := newCluster(t, 3, false)
	lc := c.client(t, redlock.WithNodeTimeout(5*time.Second))
	ctx := ctxT(t)
	tag := "{" + redistest.Key(t) + "}"
	key := tag + ":k"
	for i, name := range []string{"acquire.lua", "fence.lua", "release.lua"} {
		src, err := os.ReadFile("scripts/" + name)
		require.NoError(t, err)
		for _, s := range c.servers {
			require.NoError(t, s.Client().ScriptLoad(ctx, string(src)).Err(), i)
		}
	}
	for i, n := range []int{1000, 500, 500} {
		require.NoError(t, c.servers[i].Client().Set(ctx, tag+":fence", n, 0).Err())
	}
	acquire, fence := scriptSHA(t, "acquire.lua"), scriptSHA(t, "fence.lua")
	gate, parked := make(chan struct{}), make(chan struct{})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before the client's Close, which waits for the parked request
	ranOn2 := make(chan struct{})
	hook := func(node int) onTrip {
		return func(cmds []redis.Cmder, send func() error) error {
			args := cmds[0].Args()
			if len(cmds) != 1 || cmds[0].Name() != "evalsha" {
				return send()
			}
			switch {
			case args[1] == acquire && slices.Contains(args, any("b")) && node == 0:
				cmds[0].SetErr(redis.ErrClosed)
				return redis.ErrClosed
			case args[1] == acquire && slices.Contains(args, any("b")) && node == 1:
				close(parked)
				<-gate
			case args[1] == acquire && slices.Contains(args, any("b")) && node == 2:
				defer close(ranOn2)
			case args[1] == fence && slices.Contains(args, any("1001")) && node == 1:
				cmds[0].SetErr(redis.ErrClosed)
				return redis.ErrClosed
			}
			return send()
		}
	}
	for i, n := range c.nodes {
		n.(*redis.Client).AddHook(hook(i))
	}

	bDone := make(chan *redlock.Lock, 1)
	go func() {
		l, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("b"))
		assert.NoError(t, err)
		bDone <- l
	}()
	<-parked
	<-ranOn2
	la, err := lc.TryAcquire(ctx, key, 10*time.Second, redlock.Label("a"))
	require.NoError(t, err)
	require.EqualValues(t, 1001, la.Token())
	require.NoError(t, la.Release(ctx))
	open()
	lb := <-bDone
	require.NotNil(t, lb)
	assert.Greater(t, lb.Token(), la.Token(), "b took the key after a released it")
	require.NoError(t, lb.Release(ctx))
}
