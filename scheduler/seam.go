package scheduler

import "github.com/cronlock/cronlock/internal/schedseam"

// The parts of the scheduler that only cronlock's own packages use (package schedseam).
func init() {
	schedseam.ResolveSpec = resolveSpec
}
