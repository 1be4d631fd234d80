// Package tickmath computes what every replica, and every release of cronlock, must compute
// alike about a job's ticks: the hash that H specs and jitter delays derive from, a tick's
// jitter delay, and the shortest gap between a schedule's ticks. The scheduler uses them to
// run ticks, the daemon to validate and show them.
package tickmath

import (
	"hash/fnv"
	"math"
	"strconv"
	"time"

	"github.com/robfig/cron/v3"
)

// Hash hashes its parts (FNV-1a, each part followed by a zero byte, then a 64-bit finalizer
// so that names differing in one letter land far apart). It is the same on every replica and
// in every release: H values (schedseam.ResolveSpec) and jitter delays (JitterDelay) derive
// from it, so changing it would move every user's jobs.
func Hash(parts ...string) uint64 {
	f := fnv.New64a()
	for _, p := range parts {
		f.Write([]byte(p))
		f.Write([]byte{0})
	}
	return mix64(f.Sum64())
}

// mix64 is the splitmix64 finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// JitterDelay returns the delay of tick of the job named name under job.Options.Jitter
// jitter: a hash of the name and the tick's instant (in Unix milliseconds, as in its lock key)
// mapped into [0, jitter), in whole milliseconds (as ticks are: the planned start is as exact
// in a span's or history record's milliseconds as in Go). It depends on nothing else, so every
// replica, and every release of cronlock, computes the same delay. Zero when jitter is under
// 1ms. The scheduler bounds jitter by the tick's window first, which matters only for a tick
// closer to the next one than Jitter (a daylight saving time change): its delay is then
// within that window.
func JitterDelay(name string, tick time.Time, jitter time.Duration) time.Duration {
	ms := uint64(jitter / time.Millisecond)
	if ms == 0 {
		return 0
	}
	return time.Duration(Hash(name, strconv.FormatInt(tick.UnixMilli(), 10))%ms) * time.Millisecond
}

// ShortestGap returns the shortest time between two consecutive ticks of sched among its
// next 64 ticks after from (math.MaxInt64 when it has fewer than two): the shortest gap of
// any spec whose pattern repeats within 64 ticks. A shorter gap further on (a daylight saving
// time change) bounds its own tick's delay instead.
func ShortestGap(sched cron.Schedule, from time.Time) time.Duration {
	const ticks = 64
	gap := time.Duration(math.MaxInt64)
	t := sched.Next(from)
	for range ticks {
		next := sched.Next(t)
		if next.IsZero() {
			break
		}
		gap = min(gap, next.Sub(t))
		t = next
	}
	return gap
}
