// Package ctxsleep is a sleep that a context cuts short, shared by redlock's retries and the
// demo's pauses.
package ctxsleep

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, and reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
