package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"
)

var (
	//go:embed scripts/boot.lua
	bootSrc    string
	bootScript = newScript(bootSrc)
)

// EndQuarantine ends the quarantine of every node at once, by marking it as booted long ago.
//
// A node whose boot marker is missing refuses locks for MaxTTL, because it may have lost the
// locks it held. New, empty nodes look the same, so a first deployment waits MaxTTL before
// locks can be taken — unless EndQuarantine is called. Call it only when no lock can have been
// forgotten: on first deployment, or when every client has been stopped for longer than
// MaxTTL. It returns the errors of the nodes it could not reach.
//
// Where the nodes are Redis Clusters (WithClusterNodes), each hash slot has its own marker, and
// a slot never used yet has none: EndQuarantine writes the marker of every slot, 16,384 keys
// per node, pipelined (the node must be a go-redis client), each node given at least 10s.
func (c *Client) EndQuarantine(ctx context.Context) error {
	var errs []error
	// An operator's call, not on any lock's clock: a node gets at least a second to answer.
	timeout := max(c.nodeTimeout(c.cfg.maxTTL), time.Second)
	end := func(ctx context.Context, i int) error {
		return bootScript.call([]string{c.cfg.bootKey}).run(ctx, c.nodes[i]).Err()
	}
	if c.cfg.cluster {
		timeout = max(timeout, 10*time.Second)
		end = c.endSlotQuarantines
	}
	_, err := c.fanout(ctx, c.all(), timeout, func(ctx context.Context, i int) reply {
		return reply{node: i, err: end(ctx, i)}
	}, func(r reply) bool {
		if r.err != nil {
			errs = append(errs, c.nodeError(r.node, r.err))
		}
		return false
	}, nil)
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// endSlotQuarantines sets the boot marker of every hash slot of node i to 0, in one pipeline
// (a Cluster client splits it by shard).
func (c *Client) endSlotQuarantines(ctx context.Context, i int) error {
	p, ok := c.nodes[i].(pipeliner)
	if !ok {
		return fmt.Errorf("redlock: ending the quarantine of every hash slot needs a node that pipelines (a go-redis client), not %T", c.nodes[i])
	}
	pipe := p.Pipeline()
	for slot := range slotCount {
		pipe.Set(ctx, inSlot(c.cfg.bootKey, slot), "0", 0)
	}
	_, err := pipe.Exec(ctx)
	return err
}
