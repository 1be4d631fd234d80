package redlock

import (
	"context"
	_ "embed"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
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
func (c *Client) EndQuarantine(ctx context.Context) error {
	var errs []error
	// An operator's call, not on any lock's clock: a node gets at least a second to answer.
	f := &fan{call: bootScript.call([]string{c.cfg.bootKey}), parse: func(i int, cmd *redis.Cmd) reply {
		return reply{node: i, err: cmd.Err()}
	}}
	_, err := c.fanout(ctx, f, c.all(), max(c.nodeTimeout(c.cfg.maxTTL), time.Second), func(r reply) bool {
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
