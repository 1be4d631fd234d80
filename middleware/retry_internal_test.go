package middleware

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RetryPolicy's default schedule, which users get through Retry and job.Options.Retries.
// Full jitter: the i-th wait of a fresh schedule is uniform in [0, step]. Many draws at one
// step spread over it: they all miss its lowest (or highest) quarter with probability
// (3/4)^draws, which is nil for practical purposes.
func TestDefaultRetryBackOffIsJittered(t *testing.T) {
	const draws = 1000
	for i, step := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		lo, hi := step, time.Duration(0)
		for range draws {
			b := defaultRetryBackOff()
			var d time.Duration
			for range i + 1 {
				d = b.NextBackOff()
			}
			require.True(t, d >= 0 && d <= step, "wait %d: %v not in [0, %v]", i, d, step)
			lo, hi = min(lo, d), max(hi, d)
		}
		assert.Less(t, lo, step/4, "wait %d: %d draws, none below %v", i, draws, step/4)
		assert.Greater(t, hi, step*3/4, "wait %d: %d draws, none above %v", i, draws, step*3/4)
	}
}
