package layout

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/cronlock/cronlock/job"
)

// Fields of a lock's hash, as redlock's scripts (redlock/scripts/*.lua) write them on each
// node. TestScriptsUseLockFields keeps the scripts and this list in step.
const (
	FieldValue    = "v" // the holder's lock value: 128 random bits, the proof of holding
	FieldLabel    = "l" // the holder's label (redlock.WithLabel), shown, never trusted
	FieldMetadata = "m" // what the holder stored with redlock.Metadata
	FieldToken    = "f" // the node's fencing counter when the holder took the key there
	FieldState    = "s" // StateDone once the lock is kept as a done marker
	FieldNested   = "n" // the number of nested holds counted on the node
	FieldRevoked  = "x" // set when the holder was asked to give the lock up
	FieldOuter    = "o" // the outer hold's release came while nested holds were counted
	FieldWaiter   = "w" // a waiter listens for the release
)

// Prefixes of a lock hash's per-hold fields, followed by the nested hold's id.
const (
	FieldHoldPrefix     = "h" // a nested hold counted here
	FieldReleasedPrefix = "r" // a nested hold released before its reenter reached the node
)

// StateDone is the value of FieldState of a lock kept as a done marker.
const StateDone = "done"

// SkippedMarker is the metadata of a tick kept as done because it was skipped while a previous
// run of its job was running (Overlap Forbid): replicas that come later find it done, with
// this metadata, and skip it too (skipped_overlap) instead of running it late.
const SkippedMarker = "cronlock:skipped:overlap"

// Lock is what one node's hash of a lock key holds.
type Lock struct {
	Value    string // the holder's lock value
	Label    string
	Metadata string
	Token    string // the fencing counter, as stored
	Done     bool   // kept as a done marker
	Nested   int    // nested holds counted
}

// Skipped reports whether the lock is a tick kept as done because it was skipped.
func (l Lock) Skipped() bool { return l.Done && l.Metadata == SkippedMarker }

// ParseLock reads the fields of a lock key's hash (HGETALL).
func ParseLock(h map[string]string) Lock {
	n, _ := strconv.Atoi(h[FieldNested])
	return Lock{Value: h[FieldValue], Label: h[FieldLabel], Metadata: h[FieldMetadata], Token: h[FieldToken],
		Done: h[FieldState] == StateDone, Nested: n}
}

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
