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

// errRevoked matches the error of an Extend refused because the lock was revoked (someone
// else asked its holder to give it up), and so the cause of a lease lost that way. It matches
// ErrLockLost too. cronlock's packages match it as lockseam.ErrRevoked.
var errRevoked = fmt.Errorf("%w: revoked: someone asked its holder to give it up", ErrLockLost)

// revoke asks the holder of a lock to give it up: h is the holder that an AcquireError
// reported (AcquireError.Holder), and its key is marked on every node that holds it for h, so
// that the holder's next Extend there fails with an error matching errRevoked (and
// ErrLockLost): a lease ends then, with that cause, and the holder is expected to stop its
// work and release the lock. It frees nothing: the lock stays held until its holder
// releases it or it expires, so whoever waits for it still waits for that — it only ends the
// holder's renewals, and so bounds the wait by the lock's TTL. A done marker (Holder.Done) is
// not revoked. When channel is not "", message is published on it (Pub/Sub) on each node
// where the lock is marked, in the same step: a holder that subscribed to it hears of the
// revocation at once instead of at its next renewal.
//
// It returns how many nodes marked the lock (0: h did not hold it anywhere anymore), and an
// error matching ErrQuorumUnavailable when fewer than a quorum of nodes answered. Revoking
// twice is harmless.
func (c *Client) revoke(ctx context.Context, h Holder, channel, message string) (int, error) {
	if h.value == "" || h.Key == "" {
		return 0, errors.New("redlock: revoke: the holder has no lock value: give the Holder of an AcquireError")
	}
	replies, err := c.broadcast(ctx, revokeScript, []string{h.Key}, h.value, channel, message)
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
