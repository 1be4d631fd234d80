// Package scheddefault holds the defaults of package scheduler's options that cronlock's
// daemon and tests also use (for its flags, their usage and its bounds), so that each is
// defined once. Users read them in the options' doc comments and in docs/scheduler.md
// ("Defaults").
package scheddefault

import "time"

const (
	// MaxClockSkew is the default of scheduler.WithMaxClockSkew.
	MaxClockSkew = time.Second
	// HistorySize is the default of scheduler.WithHistorySize: records kept per job and node.
	HistorySize = 100
	// TriggerPoll is how often a running scheduler reads the queue of manual runs by default
	// (schedseam.WithTriggerPoll).
	TriggerPoll = time.Second
	// RescueEvery is how often a running scheduler looks for runs whose replica vanished, by
	// default (schedseam.WithRescueEvery).
	RescueEvery = 10 * time.Second
	// Heartbeat is how often a running scheduler writes its heartbeat, by default
	// (schedseam.WithHeartbeat).
	Heartbeat = 10 * time.Second
	// BackfillMax is the default of scheduler.BackfillOptions.Max: the most ticks of a backfill.
	BackfillMax = 1000
	// MaxOutput is the most output, in bytes, that scheduler.KeepOutput keeps of a run: the
	// last bytes.
	MaxOutput = 64 << 10
)
