package redlock

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/hashslot"
	"github.com/cronlock/cronlock/internal/layout"
)

// Where a node is a Redis Cluster, a script may only touch keys of one hash slot. The keys of a
// lock share the slot of its key (they share its hash tag, or are checked to), and the keys
// the client adds — the boot marker and, for keys without a hash tag, the default fence
// counter — are then taken per slot: name + ":{" + tag + "}" (hashslot.Key). A shard that restarts empty loses the markers of the slots it serves, and those
// slots alone are in quarantine.

// perSlotKeys sets cfg.cluster when a node is a *redis.ClusterClient, and refuses a boot key
// that would not stay in the slot it is meant for.
func perSlotKeys(cfg *config, nodes []Node) error {
	for _, nd := range nodes {
		if _, ok := nd.(*redis.ClusterClient); ok {
			cfg.cluster = true
		}
	}
	if cfg.cluster && strings.Contains(cfg.bootKey, "{") {
		return fmt.Errorf("redlock: boot key %s: where the nodes are Redis Clusters, it is the prefix of one marker per hash slot and must not contain \"{\": drop the hash tag", quote(cfg.bootKey))
	}
	return nil
}

// bootMarker returns the boot marker that an acquisition of key passes to the acquire script:
// the node's, or where the nodes are Clusters the one of key's slot; "" when quarantine is off.
func (c *Client) bootMarker(key string) string {
	switch {
	case !c.cfg.quarantine:
		return ""
	case c.cfg.cluster:
		return hashslot.Key(c.cfg.bootKey, hashslot.Of(key))
	}
	return c.cfg.bootKey
}

// defaultFenceKey returns the fence counter of a lock acquired without FenceKey: one per hash
// tag; for a key without one, layout.FenceKey, or where the nodes are Clusters one per slot.
func (c *Client) defaultFenceKey(key string) string {
	if tag, ok := hashslot.Tag(key); ok {
		return "{" + tag + "}:fence"
	}
	if c.cfg.cluster {
		return hashslot.Key(layout.FenceKey, hashslot.Of(key))
	}
	return layout.FenceKey
}

// checkOwnKeys refuses lock keys that are keys of the client's own — a boot marker, a default
// fence counter, or the lock's fence counter (fence) — and a fence counter that is a boot
// marker: a script would meet a value of another kind there (WRONGTYPE), or break the keys it
// collides with.
func (c *Client) checkOwnKeys(fence string, keys []string) error {
	if c.isBootMarker(fence) {
		return fmt.Errorf("%w: fence key %s is the nodes' boot marker (WithBootKey): give the fence counter a key of its own", ErrInvalidKey, quote(fence))
	}
	for _, k := range keys {
		var what string
		switch {
		case c.isBootMarker(k):
			what = "the nodes' boot marker (WithBootKey)"
		case c.isDefaultFence(k):
			what = "a default fence counter of the locks (" + layout.FenceKey + ", or {tag}:fence for keys tagged {tag})"
		case k == fence:
			what = "the lock's fence counter (FenceKey)"
		default:
			continue
		}
		return fmt.Errorf("%w: lock key %s is %s: give the lock another key", ErrInvalidKey, quote(k), what)
	}
	return nil
}

// isBootMarker reports whether key is a boot marker of the nodes: the node's, or where the
// nodes are Clusters one of a hash slot.
func (c *Client) isBootMarker(key string) bool {
	if key == c.cfg.bootKey {
		return true
	}
	rest, ok := strings.CutPrefix(key, c.cfg.bootKey)
	return ok && c.cfg.cluster && strings.HasPrefix(rest, ":{") && key == hashslot.Key(c.cfg.bootKey, hashslot.Of(key))
}

// isDefaultFence reports whether key is a default fence counter (see defaultFenceKey) of any
// lock, without building one: layout.FenceKey, "{tag}:fence", or where the nodes are Clusters
// layout.FenceKey's counter of a hash slot.
func (c *Client) isDefaultFence(key string) bool {
	if key == layout.FenceKey {
		return true
	}
	if tag, ok := hashslot.Tag(key); ok && key[0] == '{' && len(key) == len(tag)+len("{}:fence") && strings.HasSuffix(key, "}:fence") {
		return true
	}
	return c.cfg.cluster && strings.HasPrefix(key, layout.FenceKey+":{") && key == hashslot.Key(layout.FenceKey, hashslot.Of(key))
}

// checkSlots refuses, where the nodes are Clusters, a key of lock key that is not in key's
// slot: the node would refuse the script with CROSSSLOT.
func (c *Client) checkSlots(key string, keys []string) error {
	if !c.cfg.cluster {
		return nil
	}
	slot := hashslot.Of(key)
	for _, k := range keys {
		if s := hashslot.Of(k); s != slot {
			return fmt.Errorf("redlock: key %s of lock %s is in hash slot %d, not in the lock key's slot %d: where the nodes are Redis Clusters, every key of a lock must share the lock key's hash tag (e.g. {job}:a and {job}:b)", quote(k), quote(key), s, slot)
		}
	}
	return nil
}
