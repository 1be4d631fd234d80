package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/revoke.lua
	revokeSrc    string
	revokeScript = redis.NewScript(revokeSrc)
)

// ErrRevoked matches the error of an Extend refused because the lock was revoked (see
// Revoke), and so the cause of a lease lost that way. It matches ErrLockLost too.
var ErrRevoked = fmt.Errorf("%w: revoked: someone asked its holder to give it up", ErrLockLost)

// RevokeOption configures Revoke.
type RevokeOption func(*revokeConfig)

type revokeConfig struct{ channel, message string }

// Announce publishes message on channel (Pub/Sub) on each node where Revoke marks the lock,
// in the same step: a holder that subscribed to it (see Subscribe) hears of the revocation at
// once instead of at its next renewal.
func Announce(channel, message string) RevokeOption {
	return func(c *revokeConfig) { c.channel, c.message = channel, message }
}

// Revoke asks the holder of a lock to give it up: h is the holder that an AcquireError
// reported (AcquireError.Holder), and its key is marked on every node that holds it for h, so
// that the holder's next Extend there fails with an error matching ErrRevoked (and
// ErrLockLost): a lease ends then, with that cause, and the holder is expected to stop its
// work and release the lock. Revoke frees nothing: the lock stays held until its holder
// releases it or it expires, so whoever waits for it still waits for that — it only ends the
// holder's renewals, and so bounds the wait by the lock's TTL. A done marker (Holder.Done) is
// not revoked.
//
// It returns how many nodes marked the lock (0: h did not hold it anywhere anymore), and an
// error matching ErrQuorumUnavailable when fewer than a quorum of nodes answered. Revoking
// twice is harmless.
func (c *Client) Revoke(ctx context.Context, h Holder, opts ...RevokeOption) (int, error) {
	if h.value == "" || h.Key == "" {
		return 0, errors.New("redlock: Revoke: the holder has no lock value: give the Holder of an AcquireError")
	}
	var rc revokeConfig
	for _, o := range opts {
		o(&rc)
	}
	replies, err := c.Broadcast(ctx, revokeScript, []string{h.Key}, h.value, rc.channel, rc.message)
	marked := 0
	for _, r := range replies {
		if n, ok := r.(int64); ok && n == 1 {
			marked++
		}
	}
	if err != nil {
		return marked, fmt.Errorf("redlock: revoke %s: %w", quote(h.Key), err)
	}
	return marked, nil
}
