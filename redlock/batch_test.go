package redlock

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/redistest"
)

// A batch does what its requests do one by one: random sequences of the package's scripts on
// a few shared keys — taking, refusing, releasing (with done markers, nested holds and fence
// raises), extending, marking done, a key of the wrong type, a RefuseWhile key that exists,
// and a caller's script (revoke, through broadcast), which cuts a batch — run on one node
// request by request, and on another in batches of up to k through units and split, give the
// same reply to every request and leave the same keys.
func TestBatchEqualsSequential(t *testing.T) {
	servers := redistest.StartN(t, 2, redistest.Config{})
	one, batched := servers[0].Client(), servers[1].Client()
	ctx := context.Background()
	for _, k := range []int{2, 3, 7, 64} {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("k=%d seed=%d", k, seed), func(t *testing.T) {
				calls := randomCalls(rand.New(rand.NewPCG(seed, uint64(k))), 200)
				for _, n := range []*redis.Client{one, batched} {
					require.NoError(t, n.FlushAll(ctx).Err())
					require.NoError(t, n.Set(ctx, "{b}:fence", 1_000_000_000, 0).Err())
					require.NoError(t, n.Set(ctx, "{b}:paused", "yes", 0).Err())
					require.NoError(t, n.Set(ctx, "{b}:wrong", "a string", 0).Err())
					require.NoError(t, revokeScript.Load(ctx, n).Err()) // a caller's script: run sends no source
				}
				want := make([]string, len(calls))
				for i, k := range calls {
					want[i] = replyOf(k.run(ctx, one))
				}
				got := make([]string, 0, len(calls))
				r := rand.New(rand.NewPCG(seed, 7))
				for rest := calls; len(rest) > 0; {
					n := min(1+r.IntN(2*k), len(rest))
					ops := make([]*op, n)
					for i, k := range rest[:n] {
						ops[i] = &op{f: &fan{call: k}}
					}
					rest = rest[n:]
					for _, u := range units(ops, k, false) {
						require.LessOrEqual(t, len(u.ops), k)
						u.cmd = u.call.run(ctx, batched)
						u.split(ctx)
						for _, o := range u.ops {
							got = append(got, replyOf(o.cmd))
						}
					}
				}
				for i := range calls {
					assert.Equal(t, want[i], got[i], "request %d: %v", i, calls[i].cmd)
				}
				assert.Equal(t, keysOf(t, one), keysOf(t, batched), "the keys left")
			})
		}
	}
}

// A batch's reply to a request is what the request's script alone returns, including an
// error reply: the script that failed fails alone, and the batch goes on.
func TestBatchItemErrorIsIsolated(t *testing.T) {
	n := redistest.Start(t, redistest.Config{}).Client()
	ctx := context.Background()
	require.NoError(t, n.Set(ctx, "{b}:wrong", "a string", 0).Err())
	calls := []*call{
		acquireCall("{b}:a", "v1", 0, false),
		acquireCall("{b}:wrong", "v1", 0, false),
		acquireCall("{b}:c", "v1", 0, false),
	}
	ops := make([]*op, len(calls))
	for i, k := range calls {
		ops[i] = &op{f: &fan{call: k}}
	}
	us := units(ops, 64, false)
	require.Len(t, us, 1)
	require.True(t, us[0].batch)
	us[0].cmd = us[0].call.run(ctx, n)
	us[0].split(ctx)
	require.NoError(t, ops[0].cmd.Err())
	assert.True(t, isWrongType(ops[1].cmd.Err()), "the wrong key's request: %v", ops[1].cmd.Err())
	assert.True(t, isNodeReply(ops[1].cmd.Err()), "an item's error is the node's reply, not a failure of the node")
	require.NoError(t, ops[2].cmd.Err())
	assert.Equal(t, int64(2), n.Exists(ctx, "{b}:a", "{b}:c").Val(), "both other keys taken")
}

// randomCalls returns n random calls of the package's scripts on a few keys of one hash tag.
func randomCalls(r *rand.Rand, n int) []*call {
	locks := []string{"{b}:1", "{b}:2", "{b}:3", "{b}:wrong"}
	values := []string{"v1", "v2", "v3"}
	pick := func(s []string) string { return s[r.IntN(len(s))] }
	calls := make([]*call, n)
	for i := range calls {
		key, value := pick(locks), pick(values)
		switch r.IntN(8) {
		case 0, 1:
			calls[i] = acquireCall(key, value, r.IntN(3), r.IntN(2) == 0)
		case 2, 3:
			keys, token := []string{key}, "0"
			if r.IntN(2) == 0 {
				keys, token = append(keys, "{b}:fence"), fmt.Sprint(1_000_000_000+r.IntN(50))
			}
			argv := []any{value, pick([]string{"0", "5000"}), ":released", token}
			if r.IntN(4) == 0 {
				argv = append(argv, pick([]string{"h1", "h2"}))
			}
			calls[i] = releaseScript.call(keys, argv...)
		case 4:
			calls[i] = extendScript.call([]string{key}, value, "20000")
		case 5:
			calls[i] = fenceScript.call([]string{"{b}:fence"}, fmt.Sprint(1_000_000_000+r.IntN(50)), pick([]string{"0", "9000"}))
		case 6:
			calls[i] = markDoneScript.call([]string{key}, value, "5000", "label")
		default:
			if r.IntN(2) == 0 {
				calls[i] = reenterScript.call([]string{key}, value, pick([]string{"h1", "h2"}))
			} else {
				calls[i] = callerScript(revokeScript).call([]string{key}, value, "", "")
			}
		}
	}
	return calls
}

// acquireCall is an acquisition of key with value, without quarantine: refuse says how many
// RefuseWhile keys it has (the first does not exist, the second does), counted whether it
// counts acquisitions.
func acquireCall(key, value string, refuse int, counted bool) *call {
	keys := []string{"{b}:fence", key}
	keys = append(keys, []string{"{b}:unpaused", "{b}:paused"}[:refuse]...)
	flag := "0"
	if counted {
		keys, flag = append(keys, "{b}:count"), "1"
	}
	return acquireScript.call(keys, value, "10000", "0", "label", "meta", refuse, flag, "1")
}

// replyOf renders a script's reply, or its error's first word; its remaining times (1,000 to
// 100,000 ms, which differ by when each node ran it) as "ttl".
func replyOf(cmd *redis.Cmd) string {
	if err := cmd.Err(); err != nil {
		word, _, _ := strings.Cut(err.Error(), " ")
		return "error " + word
	}
	return render(cmd.Val())
}

func render(v any) string {
	switch v := v.(type) {
	case int64:
		if v >= 1000 && v <= 100_000 {
			return "ttl"
		}
		return fmt.Sprint(v)
	case []any:
		parts := make([]string, len(v))
		for i, e := range v {
			parts[i] = render(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	}
	return fmt.Sprint(v)
}

// keysOf renders every key of a node: its type, its value or fields, and whether it expires.
func keysOf(t *testing.T, n *redis.Client) []string {
	ctx := context.Background()
	keys, err := n.Keys(ctx, "*").Result()
	require.NoError(t, err)
	slices.Sort(keys)
	out := make([]string, len(keys))
	for i, k := range keys {
		var v any
		switch n.Type(ctx, k).Val() {
		case "hash":
			v = n.HGetAll(ctx, k).Val()
		default:
			v = n.Get(ctx, k).Val()
		}
		out[i] = fmt.Sprintf("%s %v expires:%v", k, v, n.PTTL(ctx, k).Val() > time.Duration(0))
	}
	return out
}
