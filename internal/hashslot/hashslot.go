// Package hashslot is Redis Cluster's key hashing as cronlock uses it: the hash slot of a key,
// and a key named for a given slot. It is the one owner of the per-slot key layout that
// package redlock writes (the boot markers and default fence counters of Cluster nodes) and
// that cronlock's own tools read (cronlock check and the daemon's readiness probe).
package hashslot

import (
	"strconv"
	"strings"
	"sync"
)

// Count is the number of hash slots of a Redis Cluster: slots are 0 to Count-1.
const Count = 16384

// Tag returns the hash tag of key as Redis Cluster reads it — what lies between the first
// "{" and the next "}" — and whether it has one (an empty tag is none).
func Tag(key string) (string, bool) {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, "}")
	return tag, ok && tag != ""
}

// Of returns the hash slot of key as Redis Cluster computes it: of its hash tag if it has
// one, else of the whole key.
func Of(key string) int {
	if tag, ok := Tag(key); ok {
		key = tag
	}
	return int(crc16(key) % Count)
}

// Key returns the key named name in slot: name + ":{" + tag + "}". With name the boot key
// given to redlock.WithBootKey, it is the boot marker of the slot where the nodes are Redis
// Clusters: it holds the end of the slot's quarantine in microseconds of the node's clock, 0
// once ended; a slot without one has never been used, or its shard lost its memory.
func Key(name string, slot int) string { return name + ":{" + tags()[slot] + "}" }

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial value 0): Redis Cluster's key hash.
func crc16(s string) uint16 {
	var crc uint16
	for i := range len(s) {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// tags returns, for each slot, the smallest decimal number whose hash is that slot: the hash
// tag that puts a key in the slot. The table is part of the layout of the nodes' keys (the
// boot markers and default fence counters of Cluster nodes are named with it), so every
// client computes the same one, and it must never change. Its first call builds it by hashing
// the numbers from 0 up until every slot is covered (about 110,000 of them).
var tags = sync.OnceValue(func() *[Count]string {
	var tags [Count]string
	for n, left := 0, Count; left > 0; n++ {
		s := strconv.Itoa(n)
		if i := crc16(s) % Count; tags[i] == "" {
			tags[i] = s
			left--
		}
	}
	return &tags
})
