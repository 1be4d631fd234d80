package scheduler

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/redis/go-redis/v9"
)

// missedBeats is how many heartbeats in a row a replica may miss before it counts as missing.
const missedBeats = 3

// replicaRetention is how long after its last heartbeat a replica's entry is kept on the
// nodes; after that the next heartbeat of any replica drops it.
const replicaRetention = time.Hour

// Replica is what the lock nodes know of one scheduler of the cluster (a replica), from its
// heartbeats (every 10s while it runs).
type Replica struct {
	// Name is the replica's name (WithReplica).
	Name string
	// Version is the version of its program: the main module's version from the Go build
	// information ("(devel)" for a local build); a cronlock run daemon reports its own version,
	// as cronlock version prints it.
	Version string
	// Started is when its scheduler started; LastSeen the time of its last heartbeat, on its
	// own clock.
	Started, LastSeen time.Time
	// Heartbeat is the interval of its heartbeats.
	Heartbeat time.Duration
	// Jobs are the names of its registered jobs, sorted.
	Jobs []string
	// ConfigHash is a hash of its configuration: a hash of its jobs' names, specs and options
	// (cronlock run's daemons report one of their config file's jobs instead).
	ConfigHash string
	// Running counts its runs in flight: handlers running as of its last heartbeat.
	Running int
	// Alive is true while its last heartbeat is no older than MissingAfter; a replica that
	// is not alive has been missing since LastSeen. A scheduler that stopped cleanly removes
	// its entry; one that crashed or froze stays, missing, for an hour after LastSeen.
	Alive bool
	// MissingAfter is how long after LastSeen the replica counts as missing: three of its
	// heartbeat intervals plus the max clock skew (WithMaxClockSkew) of the reader.
	MissingAfter time.Duration
	// ConfigDiffers is true when the replica is alive and its ConfigHash is not the one that
	// more than half of the alive replicas report (a reload done on some replicas only); with
	// no such majority, every alive replica's configuration differs.
	ConfigDiffers bool
}

// replicaValue is how a heartbeat is stored: the value of the replica's field in the hash
// layout.ReplicasKey.
type replicaValue struct {
	Version     string   `json:"version"`
	StartedMS   int64    `json:"started_ms"`
	SeenMS      int64    `json:"seen_ms"`
	HeartbeatMS int64    `json:"heartbeat_ms"`
	Jobs        []string `json:"jobs"`
	Config      string   `json:"config"`
	Running     int      `json:"running"`
	// Stopped marks the entry Stop leaves in place of the heartbeat: newer than the heartbeat
	// that a node down at the time still holds, it hides the replica until it is pruned.
	Stopped bool `json:"stopped,omitempty"`
}

var (
	// Writes the heartbeat ARGV[2] of the replica ARGV[1] into the hash KEYS[1], drops the
	// entries last seen before ARGV[3] (ms) or not written by a heartbeat, keeps the hash for
	// ARGV[4] ms, and returns it.
	heartbeatScript = redis.NewScript(`
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  local ok, v = pcall(cjson.decode, all[i + 1])
  if not ok or type(v) ~= 'table' or type(v.seen_ms) ~= 'number' or v.seen_ms < tonumber(ARGV[3]) then
    redis.call('HDEL', KEYS[1], all[i])
  end
end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return redis.call('HGETALL', KEYS[1])`)
	readReplicasScript = redis.NewScript(`return redis.call('HGETALL', KEYS[1])`)
	leaveScript        = redis.NewScript(`return redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])`)
)

// Replicas returns every scheduler that reported a heartbeat within the last hour and did not
// stop (Stop), as the lock nodes know them, sorted by name: each node's newest heartbeat of each replica,
// merged from every node that answers, so a minority of nodes down loses nothing. It returns
// an error matching redlock.ErrQuorumUnavailable, with the replicas that could be read, if
// fewer than a quorum of nodes answered.
func (c *Control) Replicas(ctx context.Context) ([]Replica, error) {
	replies, err := lockseam.Broadcast(c.locks, ctx, readReplicasScript, []string{layout.ReplicasKey(c.cfg.prefix)})
	if replies == nil {
		return nil, fmt.Errorf("scheduler: replicas: %w", err)
	}
	out := c.mergeReplicas(replies)
	if err != nil {
		return out, fmt.Errorf("scheduler: replicas: %w", err)
	}
	return out, nil
}

// mergeReplicas reads the nodes' replies to HGETALL of the replicas' hash (nil for a node that
// did not answer): the newest heartbeat of each replica, judged alive or missing at the
// control's clock, with the configurations that differ flagged.
func (c *Control) mergeReplicas(replies []any) []Replica {
	newest := map[string]replicaValue{}
	for _, reply := range replies {
		kv, _ := reply.([]any)
		for i := 0; i+1 < len(kv); i += 2 {
			name, _ := kv[i].(string)
			raw, _ := kv[i+1].(string)
			var v replicaValue
			if json.Unmarshal([]byte(raw), &v) != nil {
				continue
			}
			if old, ok := newest[name]; !ok || v.SeenMS > old.SeenMS || v.SeenMS == old.SeenMS && v.Stopped { // a stop in the heartbeat's millisecond wins
				newest[name] = v
			}
		}
	}
	now := c.cfg.clock.Now()
	out := make([]Replica, 0, len(newest))
	configs := map[string]int{}
	alive := 0
	for name, v := range newest {
		if v.Stopped {
			continue
		}
		r := Replica{Name: name, Version: v.Version, Started: time.UnixMilli(v.StartedMS), LastSeen: time.UnixMilli(v.SeenMS),
			Heartbeat: time.Duration(v.HeartbeatMS) * time.Millisecond, Jobs: v.Jobs, ConfigHash: v.Config, Running: v.Running}
		r.MissingAfter = missedBeats*r.Heartbeat + c.cfg.maxSkew
		r.Alive = now.Sub(r.LastSeen) <= r.MissingAfter
		if r.Alive {
			configs[r.ConfigHash]++
			alive++
		}
		out = append(out, r)
	}
	for i := range out {
		out[i].ConfigDiffers = out[i].Alive && 2*configs[out[i].ConfigHash] <= alive
	}
	slices.SortFunc(out, func(a, b Replica) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// setConfigHash sets the hash of this scheduler's configuration that its heartbeats report
// (Replica.ConfigHash), and sends a heartbeat at once if the scheduler is running. Give a
// hash of whatever decides what the replicas run, so that a replica whose configuration
// differs from the others' shows; cronlock run gives one of its config file's jobs. Default,
// and with "": a hash of the registered jobs' names, specs and options.
func (s *Scheduler) setConfigHash(h string) {
	s.mu.Lock()
	s.configHash = h
	s.mu.Unlock()
	s.beatSoon()
}

// beatSoon asks the heartbeat goroutine for a heartbeat now, without blocking.
func (s *Scheduler) beatSoon() {
	select {
	case s.beatNow <- struct{}{}:
	default:
	}
}

// heartbeat writes this replica's heartbeat to the nodes at Start (started), every heartbeat
// interval, and when beatSoon asks, until ctx ends (Stop ends it);
// its requests end with ctx. It keeps what the nodes answered for the gauges (s.seen).
func (s *Scheduler) heartbeat(ctx context.Context, started time.Time) {
	defer close(s.beatDone)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.beatNow:
			t.Stop()
		}
		s.beat(ctx, started)
		t.Reset(s.cfg.heartbeat)
	}
}

// beat writes one heartbeat and keeps the replicas the nodes answered with.
func (s *Scheduler) beat(ctx context.Context, started time.Time) {
	now := s.cfg.clock.Now()
	v := s.replicaValue(started, now)
	b, _ := json.Marshal(v) // strings and numbers: cannot fail
	replies, err := lockseam.Broadcast(s.locks, ctx, heartbeatScript, []string{layout.ReplicasKey(s.cfg.prefix)},
		s.cfg.replica, string(b), now.Add(-replicaRetention).UnixMilli(), replicaRetention.Milliseconds())
	if err != nil {
		if ctx.Err() != nil { // cut short by Stop: says nothing of the nodes
			return
		}
		s.cfg.logger.Warn("cronlock: could not write the replica's heartbeat", "err", err)
		s.mu.Lock()
		s.beatFailed = true
		s.mu.Unlock()
		return
	}
	seen := s.ctl.mergeReplicas(replies)
	s.mu.Lock()
	s.seen, s.seenAt, s.beatFailed = seen, now, false
	s.offset = burstOffset(s.cfg.replica, seen)
	s.mu.Unlock()
}

// replicaValue returns this replica's heartbeat at now.
func (s *Scheduler) replicaValue(started, now time.Time) replicaValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := replicaValue{Version: s.cfg.version, StartedMS: started.UnixMilli(), SeenMS: now.UnixMilli(),
		HeartbeatMS: s.cfg.heartbeat.Milliseconds(), Jobs: make([]string, 0, len(s.entries)), Config: s.configHash}
	for rec := range s.active {
		if rec.phase() == phaseRunning {
			v.Running++
		}
	}
	lines := make([]string, 0, len(s.entries))
	for name, e := range s.entries {
		v.Jobs = append(v.Jobs, name)
		o := e.job.Options
		lines = append(lines, fmt.Sprintf("%s\x00%s\x00%v %v %v %v %v %v %v", name, e.job.Spec, o.Timeout, o.LockTTL, o.RenewEvery, o.Overlap, o.Retries, o.CatchUp, o.Jitter))
	}
	slices.Sort(v.Jobs)
	if v.Config == "" {
		slices.Sort(lines) // map order is random
		sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
		v.Config = hex.EncodeToString(sum[:6])
	}
	return v
}

// leave replaces this replica's heartbeat on the nodes with a stopped entry, within ctx and at
// most a second, unless an earlier Stop did: a scheduler that stopped is not missing, and a
// node that was down meanwhile and still has the heartbeat does not make it look missing. It does not try when the last
// heartbeat failed (or none was written): the nodes were out of reach a moment ago, and a Stop
// would wait for them.
func (s *Scheduler) leave(ctx context.Context) {
	s.mu.Lock()
	skip := s.left || s.beatFailed || s.seenAt.IsZero()
	s.mu.Unlock()
	if skip || ctx.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	b, _ := json.Marshal(replicaValue{SeenMS: s.cfg.clock.Now().UnixMilli(), Stopped: true}) // cannot fail
	if _, err := lockseam.Broadcast(s.locks, ctx, leaveScript, []string{layout.ReplicasKey(s.cfg.prefix)}, s.cfg.replica, string(b)); err != nil {
		s.cfg.logger.Warn("cronlock: could not mark the replica stopped on the nodes; on those that missed it, it shows as missing for an hour", "err", err)
		return
	}
	s.mu.Lock()
	s.left = true
	s.mu.Unlock()
}
