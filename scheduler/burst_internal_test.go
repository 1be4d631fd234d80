package scheduler

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// Replicas split the circle of job hashes evenly in the order of their names, whatever the
// order the heartbeat lists them in; a replica alone, or whose others are all missing, starts
// at its own name's hash.
func TestBurstOffset(t *testing.T) {
	alive := []Replica{{Name: "c", Alive: true}, {Name: "a", Alive: true}, {Name: "b", Alive: true}, {Name: "gone"}}
	assert.Equal(t, uint32(0), burstOffset("a", alive))
	assert.Equal(t, uint32(1<<32/3), burstOffset("b", alive))
	assert.Equal(t, uint32(2<<32/3), burstOffset("c", alive))
	assert.Equal(t, uint32(1<<31), burstOffset("d", alive[:1]), "d after c, of two")
	assert.Equal(t, hash32("a"), burstOffset("a", nil))
	assert.Equal(t, hash32("a"), burstOffset("a", []Replica{{Name: "a", Alive: true}, {Name: "gone"}}))
}

// The ticks that fireDue finds due together start in the order of their jobs' hashes from the
// replica's offset: each replica begins where its share of the circle begins, and ends with
// the jobs the others began with.
func TestBurstStartsAtTheReplicasOffset(t *testing.T) {
	var entries []*entry
	for i := range 100 {
		name := string(rune('a'+i%26)) + string(rune('a'+i/26))
		entries = append(entries, &entry{hash: hash32(name)})
	}
	now := time.Now()
	for _, offset := range []uint32{0, 1 << 30, 3 << 30} {
		due := make([]dueTick, len(entries))
		for i, e := range entries {
			due[i] = dueTick{e: e, tick: now}
		}
		burstOrder(due, offset)
		assert.True(t, slices.IsSortedFunc(due, func(a, b dueTick) int {
			return int(int64(a.e.hash-offset) - int64(b.e.hash-offset))
		}), "offset %d", offset)
		assert.GreaterOrEqual(t, due[0].e.hash, offset, "the first job is at or after the offset")
	}
}
