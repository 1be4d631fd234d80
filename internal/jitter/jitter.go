// Package jitter makes the retry schedules of cronlock's packages: exponential steps, each
// wait drawn uniformly from [0, step] ("full jitter"), so that replicas that failed together
// do not retry together.
package jitter

import (
	"math/rand/v2"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Exponential returns a fresh schedule whose steps start at initial and double up to max,
// each wait uniform in [0, step], without an elapsed-time limit (its callers bound the
// retries with their own contexts and deadlines).
func Exponential(initial, max time.Duration) backoff.BackOff {
	return &full{b: backoff.NewExponentialBackOff(
		backoff.WithInitialInterval(initial),
		backoff.WithMultiplier(2),
		backoff.WithMaxInterval(max),
		backoff.WithRandomizationFactor(0),
		backoff.WithMaxElapsedTime(0),
	)}
}

// LockRetries returns a fresh schedule of the waits between attempts at a lock: exponential
// from 10ms, doubling up to 500ms. It is the default of redlock.WithBackOff and of
// middleware.LockConfig.BackOff.
func LockRetries() backoff.BackOff { return Exponential(10*time.Millisecond, 500*time.Millisecond) }

// full draws each wait uniformly from [0, step] of the schedule it wraps.
type full struct{ b backoff.BackOff }

func (j *full) NextBackOff() time.Duration {
	d := j.b.NextBackOff()
	if d <= 0 {
		return d
	}
	return rand.N(d + 1)
}

func (j *full) Reset() { j.b.Reset() }
