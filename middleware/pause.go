package middleware

import (
	"encoding/json"
	"time"

	"github.com/cronlock/cronlock/job"
)

// HistoryKey returns the key of a job's run history on the lock nodes: {prefix:name}:history,
// a stream capped at the scheduler's history size.
func HistoryKey(prefix, name string) string { return "{" + prefix + ":" + name + "}:history" }

// PauseKey returns the key whose existence on the lock nodes pauses a job: {prefix:name}:paused.
// Lock refuses a tick while it exists on a node (redlock.RefuseWhile); written to a quorum it
// refuses every tick, until it is deleted. Its value is PauseValue's.
func PauseKey(prefix, name string) string { return "{" + prefix + ":" + name + "}:paused" }

// pauseValue is how a pause is stored.
type pauseValue struct {
	Reason string `json:"reason"`
	Since  int64  `json:"since_ms,omitempty"`
	By     string `json:"by,omitempty"`
}

// PauseValue returns the value of a job's pause key for p.
func PauseValue(p job.Pause) string {
	v := pauseValue{Reason: p.Reason, By: p.By}
	if !p.Since.IsZero() {
		v.Since = p.Since.UnixMilli()
	}
	b, _ := json.Marshal(v) // strings and a number: cannot fail
	return string(b)
}

// ParsePause reads the value of a pause key. A value not written by PauseValue (e.g. set by
// hand with redis-cli) is taken as the reason.
func ParsePause(s string) job.Pause {
	var v pauseValue
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return job.Pause{Reason: s}
	}
	p := job.Pause{Reason: v.Reason, By: v.By}
	if v.Since != 0 {
		p.Since = time.UnixMilli(v.Since)
	}
	return p
}
