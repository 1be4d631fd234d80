package daemon

import (
	"errors"
	"slices"
	"sync"

	"github.com/cronlock/cronlock/job"
)

// A reload replaces a job's definition between two of its runs, and the lock keys cannot see
// every overlap that follows: a job renamed gets a run key of its own, and a job switched from
// overlap: allow to forbid has runs under way that took no run key. So the daemon keeps, on
// this replica, what the keys do not: a run under a new definition that forbids overlap does
// not start while a run of a definition it replaced is running here.

// definition is one job as one config defined it, with its runs on this replica.
type definition struct {
	job job.Job
	// Guarded by definitions.mu:
	running int           // runs whose command runs here now
	retired bool          // replaced or removed by a reload: starts no more runs
	after   []*definition // retired definitions whose runs here this one's must not overlap
}

// definitions are the job definitions of the daemon, old and current.
type definitions struct {
	mu sync.Mutex
}

// errRetired is why a tick of a definition that a reload replaced or removed does not start
// its command: only the new definitions start runs after a reload.
var errRetired = errors.New("cronlock: the job was changed or removed by a reload before this tick's run started")

// start is called when a tick of def took its lock, before its command starts: it returns a
// skip if def was retired or a run it must not overlap is running here, and otherwise counts
// def's run until end.
func (ds *definitions) start(def *definition, replica string) error {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if def.retired {
		return &job.SkipError{Reason: job.SkipOverlap, Err: errRetired}
	}
	if slices.ContainsFunc(def.after, func(old *definition) bool { return old.running > 0 }) {
		return &job.SkipError{Reason: job.SkipOverlap, Holder: replica}
	}
	def.running++
	return nil
}

// end is called when a run that start counted ended.
func (ds *definitions) end(def *definition) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	def.running--
}

// replace retires the definitions olds, which a reload replaced with next (nil when they were
// only removed). When next forbids overlap, its runs will not start while one of olds' runs —
// or of the definitions they waited for — is running here.
func (ds *definitions) replace(next *definition, olds ...*definition) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for _, old := range olds {
		old.retired = true
		if next == nil || next.job.Overlap == job.Allow {
			continue
		}
		for _, d := range append(slices.Clone(old.after), old) {
			if d.running > 0 && !slices.Contains(next.after, d) { // a retired definition that runs nothing never will
				next.after = append(next.after, d)
			}
		}
	}
}
