package layout

import (
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/internal/redisglob"
)

// Node-wide keys of redlock, shared by every lock on a node.
const (
	// BootKey is the default key of a node's boot marker (redlock.WithBootKey): its absence
	// shows that the node lost its memory, and the node is in quarantine.
	BootKey = "cronlock:boot"
	// FenceKey is the fencing counter of the locks whose key has no hash tag and that are
	// acquired without redlock.FenceKey. Where the nodes are Redis Clusters
	// (redlock.WithClusterNodes) it is the prefix of one counter per hash slot,
	// FenceKey + ":{" + slot tag + "}".
	FenceKey = "cronlock:fence"
)

// tag returns the hash tag of every key of a job: {prefix:name}.
func tag(prefix, name string) string { return "{" + prefix + ":" + name + "}" }

// Suffixes of a job's keys after its hash tag and a colon.
const (
	tickPart     = "tick"
	attemptsPart = "attempts"
	triggerPart  = "trigger"
	runPart      = "run"
	fencePart    = "fence"
	pausedPart   = "paused"
	historyPart  = "history"
	outputPart   = "history:output"
	runningPart  = "running"
)

// TickKey returns the lock key of one tick of a job: {prefix:name}:tick:<unix ms>.
func TickKey(prefix, name string, tick time.Time) string {
	return tag(prefix, name) + ":" + tickPart + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// RunKey returns the key that a running run of a job holds when its Overlap is Forbid:
// {prefix:name}:run.
func RunKey(prefix, name string) string { return tag(prefix, name) + ":" + runPart }

// TriggerKey returns the lock key of a manual run of a job, in place of the tick key:
// {prefix:name}:trigger:<id>. It is kept as done after the run, whatever its outcome: a
// manual run runs once.
func TriggerKey(prefix, name, id string) string {
	return tag(prefix, name) + ":" + triggerPart + ":" + id
}

// AttemptsKey returns the key that counts the runs of one tick across the cluster
// (middleware.LockConfig.MaxAttempts): {prefix:name}:attempts:<unix ms>.
func AttemptsKey(prefix, name string, tick time.Time) string {
	return tag(prefix, name) + ":" + attemptsPart + ":" + strconv.FormatInt(tick.UnixMilli(), 10)
}

// PauseKey returns the key whose existence on the lock nodes pauses a job: {prefix:name}:paused.
// The lock middleware refuses a tick while it exists on a node (redlock.RefuseWhile); written
// to a quorum it refuses every tick, until it is deleted. Its value is PauseValue's.
func PauseKey(prefix, name string) string { return tag(prefix, name) + ":" + pausedPart }

// HistoryKey returns the key of a job's run history: {prefix:name}:history, a stream capped at
// the scheduler's history size.
func HistoryKey(prefix, name string) string { return tag(prefix, name) + ":" + historyPart }

// OutputKey returns the key of the stream of a job's kept outputs, beside its history:
// {prefix:name}:history:output.
func OutputKey(prefix, name string) string { return tag(prefix, name) + ":" + outputPart }

// RecordMarkerKey returns the key marking that the attempt runID of a job was recorded in its
// history: {prefix:name}:history:<run id>.
func RecordMarkerKey(prefix, name, runID string) string {
	return HistoryKey(prefix, name) + ":" + runID
}

// RunningKey returns the key of the hash of a job's runs in flight: {prefix:name}:running, one
// field per attempt (its record's run id).
func RunningKey(prefix, name string) string { return tag(prefix, name) + ":" + runningPart }

// RunningSuffix ends the key of every job's hash of runs in flight (RunningKey), the one hash
// among a job's keys that is not a lock: scripts that scan a job's keys tell it by its end.
const RunningSuffix = "}:" + runningPart

// TriggersKey returns the key of the queue of manual runs asked for (scheduler.Trigger) of
// every job under prefix: {prefix}:triggers. One queue per prefix lets a replica look for new
// requests with one request per node, whatever its number of jobs.
func TriggersKey(prefix string) string { return "{" + prefix + "}:triggers" }

// TriggersChannel returns the Pub/Sub channel on which a new manual run is announced:
// {prefix}:triggers:asked.
func TriggersChannel(prefix string) string { return TriggersKey(prefix) + ":asked" }

// ReplicasKey returns the key of the replicas' heartbeats under prefix: {prefix}:replicas, a
// hash of each scheduler's name to what it last reported (scheduler.Replicas).
func ReplicasKey(prefix string) string { return "{" + prefix + "}:replicas" }

// ReplaceChannel is the Pub/Sub channel on which a tick of an Overlap Replace job announces
// that it asked the run under way to stop: {prefix}:replace. The scheduler listens to it, and
// looks at once whether one of its runs was asked.
func ReplaceChannel(prefix string) string { return "{" + prefix + "}:replace" }

// JobMatch returns the SCAN MATCH pattern of every key of the job named name under prefix, or
// of every job under prefix when name is "".
func JobMatch(prefix, name string) string {
	if name == "" {
		return "{" + redisglob.Escape(prefix) + ":*}:*"
	}
	return tag(redisglob.Escape(prefix), redisglob.Escape(name)) + ":*"
}

// Kind is what a key of a job is.
type Kind string

// The kinds of a job's keys.
const (
	KindOther    Kind = ""         // not one of cronlock's keys
	KindTick     Kind = "tick"     // TickKey
	KindAttempts Kind = "attempts" // AttemptsKey
	KindTrigger  Kind = "trigger"  // TriggerKey
	KindRun      Kind = "run"      // RunKey
	KindFence    Kind = "fence"    // the job's fencing counter
	KindPaused   Kind = "paused"   // PauseKey
	KindHistory  Kind = "history"  // HistoryKey
	KindOutput   Kind = "output"   // OutputKey
	KindMarker   Kind = "marker"   // RecordMarkerKey
	KindRunning  Kind = "running"  // RunningKey
)

// Key is a key of a job, parsed by ParseKey.
type Key struct {
	Job  string
	Kind Kind
	// Rest is the key after the job's hash tag and its colon, e.g. "tick:1700000000000".
	Rest string
	// Tick is the tick of a tick or attempts key.
	Tick time.Time
	// Trigger is the id of a manual run's key.
	Trigger string
}

// ParseKey splits a key {prefix:job}:rest. A key not under prefix has no Job; a key of a job
// whose kind is unknown has KindOther.
func ParseKey(prefix, key string) Key {
	var k Key
	head := "{" + prefix + ":"
	end := strings.Index(key, "}:")
	if !strings.HasPrefix(key, head) || end < len(head) {
		return k
	}
	k.Job, k.Rest = key[len(head):end], key[end+2:]
	switch {
	case k.Rest == runPart, k.Rest == fencePart, k.Rest == pausedPart, k.Rest == historyPart, k.Rest == runningPart:
		k.Kind = Kind(k.Rest)
	case k.Rest == outputPart:
		k.Kind = KindOutput
	case strings.HasPrefix(k.Rest, historyPart+":"):
		k.Kind = KindMarker
	case strings.HasPrefix(k.Rest, triggerPart+":"):
		k.Kind, k.Trigger = KindTrigger, strings.TrimPrefix(k.Rest, triggerPart+":")
	default:
		for _, kind := range []Kind{KindTick, KindAttempts} {
			ms, ok := strings.CutPrefix(k.Rest, string(kind)+":")
			if n, err := strconv.ParseInt(ms, 10, 64); ok && err == nil {
				k.Kind, k.Tick = kind, time.UnixMilli(n)
			}
		}
	}
	return k
}

// PrefixMatch returns the SCAN MATCH pattern of the keys that the jobs under prefix share:
// {prefix}:*.
func PrefixMatch(prefix string) string { return "{" + redisglob.Escape(prefix) + "}:*" }
