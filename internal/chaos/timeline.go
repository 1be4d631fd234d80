package chaos

import (
	"fmt"
	"time"
)

// An effect is what a fault does to the cluster over an interval, as the checker models it:
// which workers cannot reach which nodes, which nodes are down or refuse locks, which workers
// are not running. The harness records effects as it applies faults, with the real times.
type effect struct {
	kind     effectKind
	worker   int // -1: every worker
	node     int // -1: every node
	from, to time.Time
	// upFrom is, for nodeDown, when the restart began: the node may answer from then on,
	// before the harness saw it ready at to.
	upFrom time.Time
}

type effectKind int

const (
	// nodeDown: the node's process is killed.
	nodeDown effectKind = iota
	// nodeQuarantined: the node came back without its data and refuses locks (from its
	// restart to the end of the quarantine its boot marker shows).
	nodeQuarantined
	// linkCut: the worker's requests to the node fail (blackhole, reset, or a latency above
	// the node timeout).
	linkCut
	// workerPaused: the worker's process is stopped (SIGSTOP).
	workerPaused
	// workerKilled: the worker's process was killed and is not running.
	workerKilled
	// workerStopped: the worker's process exited, stopped with SIGTERM (WorkerStop), and is
	// not running. Unlike a kill, a stop ends its runs and releases its locks first: it
	// explains no lock left behind.
	workerStopped
	// nodeClockStepped: the node's wall clock was stepped, from just before the step (the node
	// takes it within a second) to a TTL after the step back. A forward step expires the keys
	// already there early; the step back from a backward one expires those written meanwhile.
	// Either can take the lock from a holder that held it on exactly a quorum of nodes — as the
	// winner of a race often does — which Redlock's assumptions exclude (no node's clock jumps
	// by more than the drift allowance within a TTL).
	nodeClockStepped
	// nodeStalled: the harness's probe found the node slow to answer or not answering (see
	// stallProbe), without a fault on it: the host stalled.
	nodeStalled
)

// Timeline is the record of one chaos run's faults: the episodes the schedule applied and
// their effects. Its queries answer "what could worker w reach at time t".
type Timeline struct {
	Nodes, Workers, Quorum int
	// Grace extends the effects of link faults and restarts past their end, for the
	// reconnections that follow them (pooled connections that broke fail once).
	Grace time.Duration

	Episodes []Episode
	effects  []effect
	offsets  map[int][]offsetStep
	starts   map[int][]time.Time // each worker's process starts, in order
}

// An Episode is one fault as applied: its class, what it hit, and when.
type Episode struct {
	Class      Class
	What       string
	Start, End time.Time
}

func (e Episode) String() string {
	return fmt.Sprintf("%s %s [%s, %s]", e.Class, e.What, e.Start.Format("15:04:05.000"), e.End.Format("15:04:05.000"))
}

func (tl *Timeline) add(e effect) { tl.effects = append(tl.effects, e) }

// addStall adds a nodeStalled effect unless a fault of the node's own (killed, restarting,
// in quarantine, its clock stepped) was on it then, with the grace after it: a stall is what
// the host did, not what the schedule did. It reports whether it added e.
func (tl *Timeline) addStall(e effect) bool {
	for _, f := range tl.effects {
		switch f.kind {
		case nodeDown, nodeQuarantined, nodeClockStepped:
			if f.node == e.node && f.from.Before(e.to) && f.to.Add(tl.Grace).After(e.from) {
				return false
			}
		}
	}
	tl.add(e)
	return true
}

func (e effect) covers(t time.Time, grace time.Duration) bool {
	to := e.to
	if e.kind == linkCut || e.kind == nodeDown || e.kind == nodeStalled {
		to = to.Add(grace)
	}
	return !t.Before(e.from) && t.Before(to)
}

// reachable counts the nodes worker w can get an answer from at t.
func (tl *Timeline) reachable(w int, t time.Time) int {
	n := 0
	for node := range tl.Nodes {
		if tl.nodeUsable(w, node, t) {
			n++
		}
	}
	return n
}

func (tl *Timeline) nodeUsable(w, node int, t time.Time) bool {
	for _, e := range tl.effects {
		switch e.kind {
		case nodeDown, nodeQuarantined, linkCut, nodeStalled:
			if (e.node == -1 || e.node == node) && (e.worker == -1 || e.worker == w) && e.covers(t, tl.Grace) {
				return false
			}
		}
	}
	return true
}

// hardDown counts the nodes that no worker could lock at t, without the checker's graces:
// killed (until their restart began), or in quarantine.
func (tl *Timeline) hardDown(t time.Time) int {
	n := 0
	for node := range tl.Nodes {
		for _, e := range tl.effects {
			hard := e
			if e.kind == nodeDown && !e.upFrom.IsZero() {
				hard.to = e.upFrom
			}
			if e.node == node && (e.kind == nodeDown || e.kind == nodeQuarantined) && hard.covers(t, 0) {
				n++
				break
			}
		}
	}
	return n
}

// absent reports whether worker w was paused or not running at t.
func (tl *Timeline) absent(w int, t time.Time) bool {
	for _, e := range tl.effects {
		if (e.kind == workerPaused || e.kind == workerKilled || e.kind == workerStopped) && e.worker == w && e.covers(t, 0) {
			return true
		}
	}
	return false
}

// workerAway reports whether some worker was paused or killed at some time in [from, to].
func (tl *Timeline) workerAway(from, to time.Time) bool {
	for _, e := range tl.effects {
		if (e.kind == workerPaused || e.kind == workerKilled) && e.from.Before(to) && !e.to.Before(from) {
			return true
		}
	}
	return false
}

// linkCutDuring reports whether some worker's requests to some node failed (with the grace
// after the fault) at some time in [from, to].
func (tl *Timeline) linkCutDuring(from, to time.Time) bool {
	for _, e := range tl.effects {
		if (e.kind == linkCut || e.kind == nodeStalled) && e.from.Before(to) && e.to.Add(tl.Grace).After(from) {
			return true
		}
	}
	return false
}

// killAfter returns when worker w was killed first at or after t.
func (tl *Timeline) killAfter(w int, t time.Time) (time.Time, bool) {
	var at time.Time
	for _, e := range tl.effects {
		if e.kind == workerKilled && e.worker == w && !e.from.Before(t) && (at.IsZero() || e.from.Before(at)) {
			at = e.from
		}
	}
	return at, !at.IsZero()
}

// step is the resolution of the checker's scans of the timeline.
const step = 10 * time.Millisecond

// quorumStretch returns the longest stretch within [from, to] during which worker w was
// present and could reach a quorum.
func (tl *Timeline) quorumStretch(w int, from, to time.Time) time.Duration {
	var longest, cur time.Duration
	for t := from; !t.After(to); t = t.Add(step) {
		if !tl.absent(w, t) && tl.reachable(w, t) >= tl.Quorum {
			cur += step
			longest = max(longest, cur)
		} else {
			cur = 0
		}
	}
	return longest
}

// allUsable reports whether worker w could reach every node at t.
func (tl *Timeline) allUsable(w int, t time.Time) bool { return tl.reachable(w, t) == tl.Nodes }

// lostQuorum reports whether worker w was unable to reach a quorum, or was paused or killed,
// at some time in [from, to].
func (tl *Timeline) lostQuorum(w int, from, to time.Time) bool {
	for t := from; !t.After(to); t = t.Add(step) {
		if tl.absent(w, t) || tl.reachable(w, t) < tl.Quorum {
			return true
		}
	}
	return false
}

// clockStepped reports whether a node's wall clock was stepped (see nodeClockStepped) at some
// time in [from, to].
func (tl *Timeline) clockStepped(from, to time.Time) bool {
	for _, e := range tl.effects {
		if e.kind == nodeClockStepped && e.from.Before(to) && e.to.After(from) {
			return true
		}
	}
	return false
}

// started records that worker w's process was started at t.
func (tl *Timeline) started(w int, t time.Time) {
	if tl.starts == nil {
		tl.starts = map[int][]time.Time{}
	}
	tl.starts[w] = append(tl.starts[w], t)
}

// startedDuring reports whether worker w's process was started in (from, to].
func (tl *Timeline) startedDuring(w int, from, to time.Time) bool {
	for _, t := range tl.starts[w] {
		if t.After(from) && !t.After(to) {
			return true
		}
	}
	return false
}

// offsetStep is a worker's clock offset from a time on.
type offsetStep struct {
	from time.Time
	d    time.Duration
}

// setOffset records that worker w's clock is off by d from at on.
func (tl *Timeline) setOffset(w int, at time.Time, d time.Duration) {
	if tl.offsets == nil {
		tl.offsets = map[int][]offsetStep{}
	}
	tl.offsets[w] = append(tl.offsets[w], offsetStep{at, d})
}

// offset returns worker w's clock offset at t.
func (tl *Timeline) offset(w int, t time.Time) time.Duration {
	var d time.Duration
	for _, s := range tl.offsets[w] {
		if s.from.After(t) {
			break
		}
		d = s.d
	}
	return d
}
