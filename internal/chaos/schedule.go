package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// Class is a kind of fault.
type Class string

// The fault classes. Each episode of a class is planned from the seed: when, for how long,
// on which nodes or workers and how hard; only the targets of Pause and WorkerKill (the
// worker running a job at that moment) are chosen when they happen.
const (
	// NodeKill kills one or two nodes (a minority) with SIGKILL and restarts them; nodes 0
	// and 1 keep their data (AOF, fsync always), the others come back empty and quarantine.
	NodeKill Class = "node-kill"
	// MajorityKill kills three of the five nodes and restarts them.
	MajorityKill Class = "majority-kill"
	// Latency adds one-way latency on a node's links (every worker) or a worker's links
	// (every node): low (5–30ms) or above the node timeout (100–300ms).
	Latency Class = "latency"
	// Blackhole drops everything on a node's links, a worker's links, or the links between
	// one worker and two or three nodes (a partition).
	Blackhole Class = "blackhole"
	// Reset resets every connection of a node or of a worker.
	Reset Class = "reset"
	// Pause stops the worker running a job with SIGSTOP for longer than the lock TTL, then
	// continues it.
	Pause Class = "pause"
	// WorkerKill kills the worker running a job with SIGKILL and starts it again later.
	WorkerKill Class = "worker-kill"
	// FreezeAfterSuccess stops a worker with SIGSTOP right after one of its runs succeeded
	// (a testworker stops itself as its handler returns nil; a daemon worker's command stops
	// its daemon as it exits 0), for longer than the lock TTL, then continues it: the run's
	// lease is lost after its work ended, and the tick must not run again.
	FreezeAfterSuccess Class = "freeze-after-success"
	// Skew steps a worker's clock to a new offset within ±0.5s while it runs.
	Skew Class = "skew"
	// NodeClock steps one node's wall clock 1–5s forward or back with libfaketime while it
	// runs, then back; it never overlaps another fault (see docs/reliability.md).
	NodeClock Class = "node-clock"
	// Burst adds the burst set to every worker's jobs (Config.Burst Forbid jobs, all due at
	// each multiple of settings.burstEvery) and lands a fault inside a burst: from 300ms
	// before one of those instants to 500ms after it, it kills one or two nodes, adds latency above the node timeout or
	// resets connections (a node's, or a worker's), pauses or kills the worker running a job,
	// stops a worker gracefully (WorkerStop), or reloads a daemon worker's config (Reload).
	Burst Class = "burst"
)

// The faults that only the Burst class applies (burstFaults).
const (
	// WorkerStop sends a worker SIGTERM (Scheduler.Stop, or the daemon's drain), waits for it
	// to exit, and starts it again 1–4s later.
	WorkerStop Class = "worker-stop"
	// Reload sends a daemon worker SIGHUP, with its config file unchanged.
	Reload Class = "reload"
)

// Classes lists every fault class, in the order of the report.
var Classes = []Class{NodeKill, MajorityKill, Latency, Blackhole, Reset, Pause, WorkerKill, Skew, NodeClock, FreezeAfterSuccess, Burst}

// burstFaults are the faults a Burst episode lands inside a burst.
var burstFaults = []Class{NodeKill, Latency, Reset, Pause, WorkerKill, WorkerStop, Reload}

// ParseClasses parses a comma-separated list of fault classes; "all" means every class.
func ParseClasses(s string) ([]Class, error) {
	if s == "" || s == "all" {
		return Classes, nil
	}
	var out []Class
	for _, name := range strings.Split(s, ",") {
		c := Class(strings.TrimSpace(name))
		if !slices.Contains(Classes, c) {
			return nil, fmt.Errorf("fault class %q is unknown: use all, or some of %v", c, Classes)
		}
		if !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out, nil
}

// settings are the fixed parameters of a chaos run.
type settings struct {
	nodes, quorum, workers int
	daemons                int           // the last workers are daemon workers (Config.Daemons)
	ttl, maxTTL            time.Duration // tick lock TTL; lock client MaxTTL (= quarantine)
	nodeTimeout            time.Duration
	interval               time.Duration // every job runs @every interval
	workMin, workMax       time.Duration
	maxOffset              time.Duration // worker clocks are within ±maxOffset
	retries                int           // every job's Retries
	warmup, settle         time.Duration
	grace                  time.Duration // see Timeline.Grace
	aofNodes               int           // nodes 0..aofNodes-1 keep their data across kills
	// burstEvery: the burst set's jobs are all due at its multiples (Config.Burst);
	// burstWorkMin and burstWorkMax bound their runs' work.
	burstEvery                 time.Duration
	burstWorkMin, burstWorkMax time.Duration
}

var defaults = settings{
	nodes: 5, quorum: 3, workers: 4,
	ttl: 3 * time.Second, maxTTL: 10 * time.Second, nodeTimeout: 150 * time.Millisecond,
	interval: time.Second, workMin: 20 * time.Millisecond, workMax: 1200 * time.Millisecond,
	maxOffset: 500 * time.Millisecond,
	retries:   2,
	warmup:    5 * time.Second, settle: 15 * time.Second, // settle > maxTTL: a last quarantine ends
	grace:      time.Second,
	aofNodes:   2,
	burstEvery: 10 * time.Second, burstWorkMin: 10 * time.Millisecond, burstWorkMax: 200 * time.Millisecond,
}

// A Burst episode lands its fault from burstLead before a burst's instant to burstLag after.
const burstLead, burstLag = 300 * time.Millisecond, 500 * time.Millisecond

// burstSpec is the burst set's schedule: every multiple of burstEvery (10s).
const burstSpec = "*/10 * * * * *"

// planned is one episode of the schedule, relative to the start of the fault phase.
type planned struct {
	class Class
	// fault is what a Burst episode applies (one of burstFaults); for the other classes, class.
	fault   Class
	at, len time.Duration
	nodes   []int // nodes it touches (node faults)
	workers []int // workers it touches (link faults on workers)
	latency time.Duration
	offset  time.Duration // Skew: the worker's new offset; NodeClock: the node's
}

func (p planned) end() time.Duration { return p.at + p.len }

func (p planned) String() string {
	s := fmt.Sprintf("%s at +%v for %v", p.class, p.at, p.len)
	if p.fault != p.class {
		s = fmt.Sprintf("%s (%s) at +%v for %v", p.class, p.fault, p.at, p.len)
	}
	if len(p.nodes) > 0 {
		s += fmt.Sprintf(" nodes %v", p.nodes)
	}
	if len(p.workers) > 0 {
		s += fmt.Sprintf(" workers %v", p.workers)
	}
	if p.latency > 0 {
		s += fmt.Sprintf(" latency %v", p.latency)
	}
	if p.offset != 0 {
		s += fmt.Sprintf(" offset %v", p.offset)
	}
	return s
}

// exclusive classes overlap no other episode, with a TTL's margin on each side: a majority
// down says all there is to say, and a node's clock jump is safe only while every other node
// holds the lock (see docs/reliability.md).
func (p planned) exclusive() bool { return p.fault == MajorityKill || p.fault == NodeClock }

// absence faults take a worker away; one at a time, so that some workers always remain.
func (p planned) absence() bool {
	return p.fault == Pause || p.fault == WorkerKill || p.fault == FreezeAfterSuccess || p.fault == WorkerStop
}

// plan draws a fault schedule for d from seed. Episodes start 1–4s apart, or when the
// episodes under way let them, and may overlap,
// within limits: no two touch the same node or worker at once, at most two nodes are faulty
// or in quarantine at once (a minority) except in MajorityKill, one worker at most is away, and exclusive
// episodes are alone.
func plan(seed uint64, d time.Duration, classes []Class, s settings) []planned {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1)).Truncate(time.Millisecond)
	}
	pick := func(n, k int) []int {
		p := rng.Perm(n)[:k]
		slices.Sort(p)
		return p
	}
	var out []planned
	for at := 2 * time.Second; at < d; {
		c := classes[rng.IntN(len(classes))]
		e := planned{class: c, fault: c, at: at}
		if c == Burst {
			e.fault = burstFaults[rng.IntN(len(burstFaults))]
		}
		switch e.fault {
		case NodeKill:
			e.len, e.nodes = between(2*time.Second, 8*time.Second), pick(s.nodes, 1+rng.IntN(2))
		case MajorityKill:
			e.len, e.nodes = between(3*time.Second, 6*time.Second), pick(s.nodes, s.quorum)
		case Latency, Blackhole, Reset:
			if e.fault == Reset {
				e.len = 0
			} else {
				e.len = between(2*time.Second, 8*time.Second)
			}
			switch rng.IntN(3) {
			case 0:
				e.nodes = pick(s.nodes, 1)
			case 1:
				e.workers = pick(s.workers, 1)
			default:
				e.workers = pick(s.workers, 1)
				if e.fault == Blackhole {
					e.nodes = pick(s.nodes, 2+rng.IntN(2)) // a partition between them
				} else {
					e.nodes = pick(s.nodes, 1)
				}
			}
			if e.fault == Latency {
				// Inside a burst, above the node timeout: the acquisitions under way fail.
				if c != Burst && rng.IntN(2) == 0 {
					e.latency = between(5*time.Millisecond, 30*time.Millisecond)
				} else {
					e.latency = between(100*time.Millisecond, 300*time.Millisecond)
				}
			}
		case Pause, FreezeAfterSuccess:
			e.len = s.ttl + between(500*time.Millisecond, 3*time.Second)
		case WorkerKill, WorkerStop:
			e.len = between(time.Second, 4*time.Second)
			if e.fault == WorkerStop {
				e.workers = pick(s.workers, 1)
			}
		case Reload:
			if s.daemons == 0 { // nothing to reload: another burst fault
				continue
			}
			e.workers = []int{s.workers - s.daemons + rng.IntN(s.daemons)}
		case Skew:
			if s.workers == s.daemons { // a daemon's clock cannot be offset
				at += between(time.Second, 4*time.Second)
				continue
			}
			e.workers = pick(s.workers-s.daemons, 1)
			e.offset = between(-s.maxOffset, s.maxOffset)
		case NodeClock:
			e.len, e.nodes = between(3*time.Second, 8*time.Second), pick(s.nodes, 1)
			e.offset = between(time.Second, 5*time.Second)
			if rng.IntN(2) == 0 {
				e.offset = -e.offset
			}
		}
		wait := 500 * time.Millisecond
		if c == Burst {
			// From 300ms before the next burst's instant to 500ms after it, while its ticks
			// fire and their locks are taken (the fault phase starts at an instant).
			instant := (e.at + burstLead + s.burstEvery - 1).Truncate(s.burstEvery)
			e.at = instant + between(-burstLead, burstLag)
			wait = s.burstEvery
		}
		// An episode that does not fit yet waits for the ones under way to end.
		for e.busyEnd(s) <= d && conflicts(e, out, s) {
			e.at += wait
		}
		if e.busyEnd(s) > d {
			break
		}
		out = append(out, e)
		at = e.at + between(time.Second, 4*time.Second)
	}
	return out
}

// busyEnd is when an episode stops affecting the cluster: a node that comes back empty
// refuses locks for MaxTTL (and a little, until its first request) after its restart.
func (p planned) busyEnd(s settings) time.Duration {
	if p.fault == NodeKill || p.fault == MajorityKill {
		if slices.ContainsFunc(p.nodes, func(n int) bool { return n >= s.aofNodes }) {
			return p.end() + s.maxTTL + 2*time.Second
		}
	}
	return p.end()
}

func conflicts(e planned, placed []planned, s settings) bool {
	faultyNodes := map[int]bool{}
	for _, n := range e.nodes {
		faultyNodes[n] = true
	}
	for _, o := range placed {
		margin := time.Duration(0)
		if e.exclusive() || o.exclusive() {
			margin = s.ttl
		}
		// Instant episodes (Reset, Skew) still last a moment.
		if o.at-margin > e.busyEnd(s) || e.at-margin > o.busyEnd(s)+time.Millisecond {
			continue
		}
		switch {
		case e.exclusive() || o.exclusive():
			return true
		case e.absence() && o.absence():
			return true
		case sharesAny(e.workers, o.workers) && (len(e.nodes) == 0 || len(o.nodes) == 0 || sharesAny(e.nodes, o.nodes)):
			return true
		case len(e.workers) == 0 && len(o.workers) == 0 && sharesAny(e.nodes, o.nodes):
			return true
		}
		if len(o.workers) == 0 {
			for _, n := range o.nodes {
				faultyNodes[n] = true
			}
		}
	}
	return e.fault != MajorityKill && len(e.workers) == 0 && len(faultyNodes) > s.nodes-s.quorum
}

func sharesAny(a, b []int) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
