package redlock

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/hashslot"
)

// Requests that meet on a node's link are sent as one script call when they can: the link's
// sender cuts what it takes from the queue into runs of the package's own scripts (acquire,
// release, fence, extend…) and sends each run of two or more as one EVALSHA of the batch
// script, which runs every request's script in queue order, each in its own protected call,
// and returns one reply per request. The node then parses one command and enters Lua once per
// run instead of once per request; what each request does is the same, and nothing runs
// between two requests of a run, so every execution of a batch is one possible execution of
// the same requests sent one by one in a pipeline. Each request keeps its own fanout, parse
// and quorum: only the wire is shared.
//
// A request alone — one lock taken on a quiet Client — is sent as its own script, as it would
// be without batching. The scripts of callers (broadcast) are sent on their own too, and cut
// a run, so that the requests' order stays the queue's.

// defaultBatchItems is the most requests one batch carries (config.batchItems): a batch runs
// without interruption on its node, so it is bounded; 64 requests of the package's scripts run
// in well under a millisecond.
const defaultBatchItems = 64

// batchable lists the scripts that batches run: the package's own, and those that cronlock's
// other packages register (lockseam.Script) before the first batch; a script's id is its
// index plus one. frozen is set when the batch script is built: a script registered later is
// sent on its own. byHash finds a registered script from the *redis.Script broadcast is given.
var (
	scriptsMu sync.Mutex
	batchable []*script
	byHash    = map[string]*script{}
	frozen    bool
)

// batchScript is the script that runs a batch: every batchable script as a Lua function, and
// a loop over the batch's requests. It is built on first use.
var batchScript = sync.OnceValue(func() *script {
	scriptsMu.Lock()
	defer scriptsMu.Unlock()
	frozen = true
	var b strings.Builder
	b.WriteString("local scripts = {}\n")
	for i, s := range batchable {
		fmt.Fprintf(&b, "scripts[%d] = function(KEYS, ARGV)\n%s\nend\n", i+1, s.src)
	}
	b.WriteString(batchLoop)
	return compile(b.String())
})

// batchLoop runs a batch. ARGV[1] is the number of requests n; then, per request, its
// script's id and how many keys and arguments it has; then every request's arguments. KEYS
// are every request's keys. It returns one {0, reply} or {1, error message} per request, in
// order: a request whose script fails (a key of the wrong type) fails alone, leaving what it
// wrote before the error, as a script failing on its own does.
const batchLoop = `local n = tonumber(ARGV[1])
local out = {}
local k, a = 1, 2 + 3 * n
for i = 1, n do
  local h = 3 * i - 1
  local id, nk, na = tonumber(ARGV[h]), tonumber(ARGV[h + 1]), tonumber(ARGV[h + 2])
  local keys, argv = {}, {}
  for j = 1, nk do
    keys[j] = KEYS[k + j - 1]
  end
  for j = 1, na do
    argv[j] = ARGV[a + j - 1]
  end
  k, a = k + nk, a + na
  local ok, r = pcall(scripts[id], keys, argv)
  if not ok then
    if type(r) == 'table' and r.err then
      r = r.err
    end
    out[i] = {1, tostring(r)}
  elseif type(r) == 'table' and r.err then
    out[i] = {1, r.err}
  else
    out[i] = {0, r}
  end
end
return out
`

// unit is one command of a pipeline: one request's script call, or a batch of requests.
type unit struct {
	call  *call
	ops   []*op // the requests it carries, in order
	batch bool
	cmd   *redis.Cmd
}

// units cuts the live requests of a batch sent to a node into the commands that carry them:
// runs of up to k requests of batchable scripts become batches; on a Redis Cluster node
// (cluster), whose scripts' keys must share a hash slot, a run is cut per slot.
func units(live []*op, k int, cluster bool) []unit {
	out := make([]unit, 0, len(live))
	if k <= 1 || len(live) == 1 {
		for j, o := range live {
			out = append(out, unit{call: o.f.call, ops: live[j : j+1 : j+1]})
		}
		return out
	}
	var open map[int]int // the runs still open, by slot (0 off a Cluster): their index in out
	for j, o := range live {
		slot, ok := runSlot(o.f.call, cluster)
		switch i, isOpen := open[slot]; {
		case !ok && cluster && len(o.f.call.keys) > 0:
			delete(open, hashslot.Of(o.f.call.keys[0]))
		case !ok:
			clear(open)
		case isOpen && len(out[i].ops) < k:
			out[i].ops = append(out[i].ops, o)
			continue
		default:
			if open == nil {
				open = map[int]int{}
			}
			open[slot] = len(out)
		}
		out = append(out, unit{call: o.f.call, ops: live[j : j+1 : j+1]})
	}
	for i := range out {
		if len(out[i].ops) > 1 {
			out[i].batch, out[i].call = true, batchCall(out[i].ops)
		}
	}
	return out
}

// runSlot reports whether a call can go in a batch, and the run it joins: per hash slot on a
// Cluster node, else one.
func runSlot(k *call, cluster bool) (int, bool) {
	if k.s.id == 0 || len(k.keys) == 0 {
		return 0, false
	}
	if !cluster {
		return 0, true
	}
	return hashslot.Of(k.keys[0]), true
}

// batchCall builds the batch script's call that runs the ops' calls.
func batchCall(ops []*op) *call {
	nkeys, nargs := 0, 1+3*len(ops)
	for _, o := range ops {
		nkeys += len(o.f.call.keys)
		nargs += len(o.f.call.argv())
	}
	s := batchScript()
	k := &call{s: s, keys: make([]string, 0, nkeys)}
	k.cmd = make([]any, 3, 3+nkeys+nargs)
	k.cmd[0], k.cmd[1], k.cmd[2] = "evalsha", s.sha, nkeys
	for _, o := range ops {
		k.keys = append(k.keys, o.f.call.keys...)
	}
	for _, key := range k.keys {
		k.cmd = append(k.cmd, key)
	}
	k.cmd = append(k.cmd, len(ops))
	for _, o := range ops {
		k.cmd = append(k.cmd, o.f.call.s.id, len(o.f.call.keys), len(o.f.call.argv()))
	}
	for _, o := range ops {
		k.cmd = append(k.cmd, o.f.call.argv()...)
	}
	return k
}

// split hands each of u's requests its own reply: the unit's, or its item of the batch's.
func (u *unit) split(ctx context.Context) {
	if !u.batch {
		u.ops[0].cmd = u.cmd
		return
	}
	items, err := u.cmd.Slice()
	if err == nil && len(items) != len(u.ops) {
		err = fmt.Errorf("redlock: a batch of %d requests got %d replies", len(u.ops), len(items))
	}
	for i, o := range u.ops {
		o.cmd = redis.NewCmd(ctx)
		if err != nil {
			o.cmd.SetErr(err)
			continue
		}
		item(o.cmd, items[i])
	}
}

// item sets cmd to a batch's reply to one request: {0} (the script returned nothing),
// {0, reply} or {1, error message}.
func item(cmd *redis.Cmd, v any) {
	r, _ := v.([]any)
	var status int64 = -1
	var last any
	if len(r) == 1 || len(r) == 2 {
		status, _ = r[0].(int64)
		last = r[len(r)-1]
	}
	switch msg, isMsg := last.(string); {
	case status == 0 && len(r) == 1:
		cmd.SetErr(redis.Nil)
	case status == 0:
		cmd.SetVal(last)
	case status == 1 && len(r) == 2 && isMsg:
		cmd.SetErr(scriptError(msg))
	default:
		cmd.SetErr(fmt.Errorf("redlock: malformed batch reply %v", v))
	}
}

// scriptError is the error of one request of a batch, as the node reported it: a Redis
// error reply, as if the request's script had failed on its own.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as an error reply of a node (redis.Error).
func (scriptError) RedisError() {}

// carried returns the SHA-1 of the script of each request that a script command (EVALSHA or
// EVAL, as its arguments) carries: one per request of a batch, else the command's own.
func carried(args []any) []string {
	if len(args) < 3 {
		return nil
	}
	b := batchScript()
	if args[1] != b.sha && args[1] != b.src {
		return []string{fmt.Sprint(args[1])}
	}
	keys, _ := args[2].(int)
	n, _ := args[3+keys].(int)
	out := make([]string, n)
	for i := range out {
		id, _ := args[4+keys+3*i].(int)
		out[i] = batchable[id-1].Hash()
	}
	return out
}

// register adds s to the scripts that batches run, unless the batch script was built, and
// returns its id (0: batches do not run it).
func register(s *script) int {
	scriptsMu.Lock()
	defer scriptsMu.Unlock()
	byHash[s.Hash()] = s
	if frozen {
		return 0
	}
	batchable = append(batchable, s)
	return len(batchable)
}

// callerScript returns the script for a caller's *redis.Script: the registered one
// (lockseam.Script), which batches may run, or a wrapper whose source go-redis keeps.
func callerScript(rs *redis.Script) *script {
	scriptsMu.Lock()
	s := byHash[rs.Hash()]
	scriptsMu.Unlock()
	if s != nil {
		return s
	}
	return &script{Script: rs, sha: rs.Hash()}
}

// registerCaller returns a script of cronlock's other packages, registered so that batches run
// it with the package's own (lockseam.Script).
func registerCaller(src string) *redis.Script {
	s := compile(src)
	s.id = register(s)
	return s.Script
}
