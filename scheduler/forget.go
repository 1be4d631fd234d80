package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
)

// ErrJobRunning: Forget found a lock of the job held on a node: a run of it is going on.
var ErrJobRunning = errors.New("scheduler: the job is running")

// Scripts of Forget.
var (
	// Looks at every key of one job on one node (ARGV[1]: their SCAN MATCH pattern; KEYS[1], the
	// job's run key, names the job's hash slot). A lock of the job held there (a hash whose state
	// is not done, as redlock writes them; not the hash of runs in flight, layout.RunningKey)
	// refuses: {1, key}. Otherwise, when ARGV[2] is "delete", every key of the job is deleted:
	// {0, keys deleted}.
	forgetScript = redis.NewScript(`
local found, cursor = {}, '0'
repeat
  local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    if redis.call('TYPE', k).ok == 'hash' and string.sub(k, -` + strconv.Itoa(len(layout.RunningSuffix)) + `) ~= '` + layout.RunningSuffix + `' and redis.call('HGET', k, '` + layout.FieldState + `') ~= '` + layout.StateDone + `' then
      return {1, k}
    end
    found[#found + 1] = k
  end
until cursor == '0'
local n = 0
if ARGV[2] == 'delete' then
  for _, k in ipairs(found) do
    n = n + redis.call('DEL', k)
  end
end
return {0, n}`)
	// Drops the job's requests (ARGV[1]: its name) from the queue of manual runs: the members
	// "<id> <job>" and "<id> <job> <by>" (see enqueueScript).
	forgetTriggersScript = redis.NewScript(`
local n = 0
for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local sp = string.find(m, ' ', 1, true)
  local name = sp and string.sub(m, sp + 1)
  local by = name and string.find(name, ' ', 1, true)
  if by then
    name = string.sub(name, 1, by - 1)
  end
  if name == ARGV[1] then
    n = n + redis.call('ZREM', KEYS[1], m)
  end
end
return n`)
)

// Forget removes from the lock nodes everything the job named name left there: its fence
// counter, run history, runs in flight, pause, done markers, attempt counts and waiting manual
// runs. It is for
// a job that no scheduler runs any more: remove it from every replica first (a replica that
// still has it writes its state anew at its next tick). Nothing in a scheduler's memory
// changes.
//
// It refuses, changing nothing, while a lock of the job is held on a node that answers — a run
// is going on somewhere — with an error matching ErrJobRunning: try again once the run ended.
// It first looks on every node and only then deletes, so a refusal leaves the job whole; a
// run that starts between the two may still find part of the job's state gone.
//
// A job that is added again after Forget starts afresh: an empty history, and fencing tokens
// from a new counter, which starts at the node's time in microseconds and so above the
// tokens of before (see package redlock). The keys are found with SCAN on each node, in one
// script: a node with millions of keys is busy for that long.
//
// It returns an error matching redlock.ErrQuorumUnavailable if fewer than a quorum of nodes
// answered: before the deletion, nothing was deleted; after it, the nodes that did not answer
// keep their copy, and Forget may be called again.
func (c *Control) Forget(ctx context.Context, name string) error {
	if name == "" {
		return errors.New("scheduler: forget: the job name is empty: give the name of a job that no scheduler runs any more")
	}
	keys := []string{layout.RunKey(c.cfg.prefix, name)}
	match := layout.JobMatch(c.cfg.prefix, name)
	deleted := 0
	for _, phase := range []string{"check", "delete"} {
		replies, err := lockseam.Broadcast(c.locks, ctx, forgetScript, keys, match, phase)
		for i, r := range replies {
			v, _ := r.([]any)
			if len(v) != 2 {
				continue // the node did not answer: counted in err
			}
			if held, _ := v[0].(int64); held == 1 {
				return fmt.Errorf("%w: forget %q: %v is held on node %d: wait for the run to end, then forget again", ErrJobRunning, name, v[1], i)
			}
			n, _ := v[1].(int64)
			deleted += int(n)
		}
		if err != nil {
			what := "nothing was deleted"
			if phase == "delete" {
				what = "the nodes that did not answer keep the job's state: forget again"
			}
			return fmt.Errorf("scheduler: forget %q: %s: %w", name, what, err)
		}
	}
	if _, err := lockseam.Broadcast(c.locks, ctx, forgetTriggersScript, []string{layout.TriggersKey(c.cfg.prefix)}, name); err != nil {
		return fmt.Errorf("scheduler: forget %q: its waiting manual runs: %w", name, err)
	}
	c.cfg.logger.Info("cronlock: job forgotten", "job", name, "keys_deleted", deleted, "replica", c.cfg.replica)
	return nil
}
