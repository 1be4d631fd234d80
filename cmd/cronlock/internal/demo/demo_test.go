package demo

import (
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
)

// removeKeys takes every key the demo writes — its jobs' keys, the queue of manual runs, the
// boot key — and nothing else: a run triggered while a node was cut off can leave the queue
// there.
func TestRemoveKeysTakesEveryDemoKey(t *testing.T) {
	m := miniredis.RunT(t)
	for _, k := range []string{"user:key", "{p:report}:tick:1", "{p:report}:run", "{p}:triggers", "p:boot", "{pp}:triggers"} {
		m.Set(k, "v")
	}
	var out strings.Builder
	removeKeys([]string{m.Addr()}, "p", &out)
	if keys := m.Keys(); !slices.Equal(keys, []string{"user:key", "{pp}:triggers"}) {
		t.Errorf("the node keeps %q, want only the user's keys", keys)
	}
	if !strings.Contains(out.String(), "removed the demo's 4 keys") {
		t.Errorf("output: %q", out.String())
	}
}
