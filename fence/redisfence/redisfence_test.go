package redisfence_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/redisfence"
	"github.com/cronlock/cronlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func wantStale(t *testing.T, err error, resource string, token, stored uint64) {
	t.Helper()
	var stale *fence.StaleError
	if !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) || *stale != (fence.StaleError{Resource: resource, Token: token, Stored: stored}) {
		t.Fatalf("%v, want StaleError{%s %d %d}", err, resource, token, stored)
	}
}

func TestSetHSetDelRefuseALowerToken(t *testing.T) {
	rdb := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	const r = "report"
	key, hkey := "{report}:value", "{report}:hash"
	if err := redisfence.Set(ctx, rdb, r, 10, key, "ten", time.Hour); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Hour {
		t.Fatalf("PTTL %v after Set with expiration 1h", ttl)
	}
	wantStale(t, redisfence.Set(ctx, rdb, r, 5, key, "five", 0), r, 5, 10)
	wantStale(t, redisfence.HSet(ctx, rdb, r, 9, hkey, "f", "nine"), r, 9, 10)
	_, err := redisfence.Del(ctx, rdb, r, 1, key)
	wantStale(t, err, r, 1, 10)
	if v := rdb.Get(ctx, key).Val(); v != "ten" {
		t.Fatalf("value %q after refused writes, want ten", v)
	}
	if n := rdb.Exists(ctx, hkey).Val(); n != 0 {
		t.Fatal("a refused HSet wrote its hash")
	}
	if err := redisfence.Set(ctx, rdb, r, 10, key, "ten again", 0); err != nil {
		t.Fatalf("equal token: %v, want it to pass (the same holder writing again)", err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl != -1 {
		t.Fatalf("PTTL %v after Set without expiration, want none (-1)", ttl)
	}
	if err := redisfence.HSet(ctx, rdb, r, 11, hkey, "a", 1, "b", "two"); err != nil {
		t.Fatal(err)
	}
	if h := rdb.HGetAll(ctx, hkey).Val(); h["a"] != "1" || h["b"] != "two" {
		t.Fatalf("hash %v", h)
	}
	if n, err := redisfence.Del(ctx, rdb, r, 12, key, hkey); err != nil || n != 2 {
		t.Fatalf("Del = %d, %v; want 2, nil", n, err)
	}
	if v := rdb.Get(ctx, redisfence.Key(r)).Val(); v != "12" {
		t.Fatalf("fence key %q, want 12", v)
	}
}

// Tokens are compared exactly, also above 2^53 where Lua numbers are not.
func TestTokensAboveTwoToThe53(t *testing.T) {
	rdb := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	const r = "big"
	for _, tok := range []uint64{1 << 53, 1<<53 + 2, math.MaxUint64} {
		if err := redisfence.Set(ctx, rdb, r, tok, "{big}:v", tok, 0); err != nil {
			t.Fatalf("token %d: %v", tok, err)
		}
	}
	wantStale(t, redisfence.Set(ctx, rdb, r, math.MaxUint64-1, "{big}:v", "x", 0), r, math.MaxUint64-1, math.MaxUint64)
	if err := redisfence.Set(ctx, rdb, "big2", 1<<53+2, "{big2}:v", "x", 0); err != nil {
		t.Fatal(err)
	}
	wantStale(t, redisfence.Set(ctx, rdb, "big2", 1<<53+1, "{big2}:v", "y", 0), "big2", 1<<53+1, 1<<53+2)
	wantStale(t, redisfence.Set(ctx, rdb, "big2", 9, "{big2}:v", "y", 0), "big2", 9, 1<<53+2)
}

func TestScriptRunsTheCallersWriteUnderTheCheck(t *testing.T) {
	rdb := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	incr := redisfence.NewScript(`redis.call('RPUSH', KEYS[2], ARGV[2])
return {#KEYS, #ARGV, redis.call('INCRBY', KEYS[1], ARGV[1])}`)
	keys := []string{"{job}:n", "{job}:log"}
	res, err := incr.Run(ctx, rdb, "job", 7, keys, 5, "first")
	if err != nil {
		t.Fatal(err)
	}
	if got := res.([]any); got[0] != int64(2) || got[1] != int64(2) || got[2] != int64(5) {
		t.Fatalf("body returned %v, want [2 2 5]: it sees only its own keys and args", got)
	}
	_, err = incr.Run(ctx, rdb, "job", 6, keys, 100, "stale")
	wantStale(t, err, "job", 6, 7)
	if n, l := rdb.Get(ctx, "{job}:n").Val(), rdb.LRange(ctx, "{job}:log", 0, -1).Val(); n != "5" || len(l) != 1 {
		t.Fatalf("after a refused run: n=%s log=%v, want 5 [first]", n, l)
	}
	// A body that fails does not store its token.
	bad := redisfence.NewScript(`return redis.call('INCR', KEYS[1])`)
	if err := rdb.Set(ctx, "{job}:s", "text", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Run(ctx, rdb, "job", 8, []string{"{job}:s"}); err == nil || errors.Is(err, fence.ErrStale) {
		t.Fatalf("failing body: %v, want its error", err)
	}
	if v := rdb.Get(ctx, redisfence.Key("job")).Val(); v != "7" {
		t.Fatalf("fence key %q after a failed body, want 7", v)
	}
}

// Many writers with tokens in no order: no write with a lower token lands after one with a
// higher token did, and the fence key holds the highest.
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	rdb := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	logged := redisfence.NewScript(`redis.call('SET', KEYS[1], ARGV[1])
return redis.call('RPUSH', KEYS[2], ARGV[1])`)
	const writers, writes = 8, 100
	var wg sync.WaitGroup
	var accepted, refused [writers]int
	errs := make(chan error, writers)
	var highest [writers]uint64
	for w := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			for range writes {
				tok := 1 + rng.Uint64N(1000)
				_, err := logged.Run(ctx, rdb, "c", tok, []string{"{c}:v", "{c}:log"}, tok)
				switch {
				case err == nil:
					accepted[w]++
					highest[w] = max(highest[w], tok)
				case errors.Is(err, fence.ErrStale):
					refused[w]++
				default:
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	log := rdb.LRange(ctx, "{c}:log", 0, -1).Val()
	prev := uint64(0)
	for i, s := range log {
		tok, _ := strconv.ParseUint(s, 10, 64)
		if tok < prev {
			t.Fatalf("write %d landed with token %d after token %d", i, tok, prev)
		}
		prev = tok
	}
	sum := func(a [writers]int) (n int) {
		for _, v := range a {
			n += v
		}
		return n
	}
	top := uint64(0)
	for _, h := range highest {
		top = max(top, h)
	}
	if len(log) != sum(accepted) || sum(refused) == 0 {
		t.Fatalf("%d writes logged, %d accepted, %d refused: want as many logged as accepted, and some refused", len(log), sum(accepted), sum(refused))
	}
	if v := rdb.Get(ctx, redisfence.Key("c")).Val(); v != strconv.FormatUint(top, 10) {
		t.Fatalf("fence key %s, highest accepted %d", v, top)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	rdb := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	_, delNone := redisfence.Del(ctx, rdb, "r", 1)
	_, runNil := redisfence.NewScript(`return 1`).Run(ctx, nil, "r", 1, nil)
	_, runTypedNil := redisfence.NewScript(`return 1`).Run(ctx, (*redis.Client)(nil), "r", 1, nil)
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"token 0", redisfence.Set(ctx, rdb, "r", 0, "{r}:v", "x", 0), `token for resource "r" is 0: pass the run's fencing token`},
		{"empty resource", redisfence.Set(ctx, rdb, "", 1, "{}:v", "x", 0), "resource is empty"},
		{"braces", redisfence.Set(ctx, rdb, "a}b", 1, "{a}b}:v", "x", 0), `resource "a}b" has a brace`},
		{"other slot", redisfence.Set(ctx, rdb, "r", 1, "plain", "x", 0), `key "plain" is not in the hash slot of the fence key "{r}:fence": name it with the tag {r}`},
		{"negative expiration", redisfence.Set(ctx, rdb, "r", 1, "{r}:v", "x", -time.Second), "expiration -1s"},
		{"odd values", redisfence.HSet(ctx, rdb, "r", 1, "{r}:h", "f"), "give field, value pairs"},
		{"no keys", delNone, "no keys"},
		{"nil rdb", runNil, "rdb is nil"},
		{"typed nil rdb", runTypedNil, "rdb is nil"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || errors.Is(c.err, fence.ErrStale) {
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	if n := rdb.DBSize(ctx).Val(); n != 0 {
		t.Fatalf("%d keys after bad input, want 0", n)
	}
}

// On a Redis Cluster the script runs on the node of the resource's slot.
func TestGuardedWritesOnACluster(t *testing.T) {
	rdb := redistest.StartClusters(t, 1, 3, redistest.Config{})[0].Client()
	ctx := context.Background()
	for _, r := range []string{"a", "b", "c", "d"} {
		if err := redisfence.Set(ctx, rdb, r, 10, "{"+r+"}:v", "ten", 0); err != nil {
			t.Fatalf("resource %s: %v", r, err)
		}
		wantStale(t, redisfence.Set(ctx, rdb, r, 9, "{"+r+"}:v", "nine", 0), r, 9, 10)
		if v := rdb.Get(ctx, "{"+r+"}:v").Val(); v != "ten" {
			t.Fatalf("resource %s: value %q, want ten", r, v)
		}
	}
}
