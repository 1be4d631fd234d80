package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/hashslot"
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
	// An operator's call, not on any lock's clock: a node gets at least a second to answer.
	timeout := max(c.nodeTimeout(c.cfg.maxTTL), time.Second)
	if c.cfg.cluster {
		return c.endSlotQuarantines(ctx, max(timeout, 10*time.Second))
	}
	var errs []error
	f := &fan{call: bootScript.call([]string{c.cfg.bootKey}), parse: func(i int, cmd *redis.Cmd) reply {
		return reply{node: i, err: cmd.Err()}
	}}
	_, err := c.fanout(ctx, f, c.all(), timeout, func(r reply) bool {
		if r.err != nil {
			errs = append(errs, c.nodeError(r.node, r.err))
		}
		return false
	})
	if err != nil {
		return err
	}
	return errors.Join(errs...)
}

// endSlotQuarantines sets the boot marker of every hash slot of every node to 0: the nodes in
// parallel, each in one pipeline (a Cluster client splits it by shard) bounded by timeout.
func (c *Client) endSlotQuarantines(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Go(func() {
			p, ok := n.(pipeNode)
			if !ok {
				errs[i] = c.nodeError(i, fmt.Errorf("ending the quarantine of every hash slot needs a node that pipelines (a go-redis client), not %T", n))
				return
			}
			pipe := p.Pipeline()
			for slot := range hashslot.Count {
				pipe.Set(ctx, hashslot.Key(c.cfg.bootKey, slot), "0", 0)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				errs[i] = c.nodeError(i, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}
