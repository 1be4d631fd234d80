package redlock

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// broadcast runs script on every node in parallel and waits for every reply, each request
// bounded by max(NodeTimeout(MaxTTL), 1s). It is for state kept beside the locks — written to a
// quorum, read merged from the nodes that answer — such as a key given to refuseWhile: package
// scheduler keeps its pauses, manual runs and history so (through package lockseam).
//
// It returns each node's reply, indexed like the nodes given to New (nil where the node
// failed), and, when fewer than a quorum of nodes answered, a *quorumError matching
// ErrQuorumUnavailable with every failed node's error. The replies of the nodes that answered
// are returned in either case.
func (c *Client) broadcast(ctx context.Context, script *redis.Script, keys []string, args ...any) ([]any, error) {
	if script == nil {
		return nil, errors.New("redlock: broadcast: the script is nil")
	}
	out := make([]any, len(c.nodes))
	t := tally{n: len(c.nodes), quorum: c.quorum}
	f := &fan{call: callerScript(script).call(keys, args...), parse: func(i int, cmd *redis.Cmd) reply {
		v, err := cmd.Result()
		if errors.Is(err, redis.Nil) { // a nil reply is an answer
			err = nil
		}
		if err != nil {
			return reply{node: i, outcome: outcomeError, err: err}
		}
		return reply{node: i, outcome: outcomeOK, value: v}
	}}
	_, err := c.fanout(ctx, f, c.all(), max(c.nodeTimeout(c.cfg.maxTTL), time.Second), func(r reply) bool {
		out[r.node] = r.value
		t.add(c, r)
		return false
	})
	if err != nil {
		return nil, err
	}
	if t.ok < c.quorum {
		key := ""
		if len(keys) > 0 {
			key = keys[0]
		}
		return out, &quorumError{Op: "broadcast", Key: key, Reason: ErrQuorumUnavailable, OK: t.ok, Failed: t.failed, Nodes: t.errs}
	}
	return out, nil
}
