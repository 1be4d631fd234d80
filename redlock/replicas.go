package redlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrNotReplicated is matched by a node's error when the node did what was asked but fewer of
// its replicas than WaitForReplicas asks for acknowledged it in time: the node's yes does not
// count, since a failover to a replica that missed it would forget it.
var ErrNotReplicated = errors.New("redlock: not acknowledged by the node's replicas")

// pipeliner is what a node needs for WaitForReplicas: go-redis's *redis.Client,
// *redis.ClusterClient and *redis.Ring have it.
type pipeliner interface {
	Pipeline() redis.Pipeliner
}

// runWaiting sends the call to node like run; with replicas > 0 it sends WAIT replicas in the
// same pipeline, so that one round trip both runs the script and waits for the node's replicas,
// and fails with ErrNotReplicated when fewer acknowledged before ctx's deadline.
func (k *call) runWaiting(ctx context.Context, node Node, replicas int) *redis.Cmd {
	if replicas == 0 {
		return k.run(ctx, node)
	}
	p, ok := node.(pipeliner)
	if !ok {
		cmd := redis.NewCmd(ctx)
		cmd.SetErr(fmt.Errorf("redlock: WaitForReplicas needs a node that pipelines (a go-redis client), not %T", node))
		return cmd
	}
	var timeout time.Duration
	send := func(args []any) (*redis.Cmd, *redis.Cmd) {
		// WAIT answers as soon as enough replicas acknowledged, or when its timeout passed —
		// which Redis notices on its server cron, up to 1/hz (100ms by default) late: give it
		// half of what is left of the request's deadline.
		timeout = time.Second
		if d, ok := ctx.Deadline(); ok {
			timeout = max(time.Until(d)/2, time.Millisecond)
		}
		pipe := p.Pipeline()
		cmd := pipe.Do(ctx, args...)
		wait := pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
		_, _ = pipe.Exec(ctx) // each command keeps its own error
		return cmd, wait
	}
	cmd, wait := send(k.cmd)
	if noScript(cmd) {
		cmd, wait = send(k.eval())
	}
	if cmd.Err() != nil {
		return cmd
	}
	switch acks, err := wait.Int64(); {
	case err != nil:
		cmd.SetErr(fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err))
	case acks < int64(replicas):
		cmd.SetErr(fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acks, replicas, timeout))
	}
	return cmd
}
