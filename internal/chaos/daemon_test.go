//go:build linux

package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadDaemonLog(t *testing.T) {
	w := &worker{h: &harness{cfg: Config{Dir: t.TempDir()}}, name: "d3"}
	log := `{"time":"2026-12-06T16:01:10.10Z","level":"DEBUG","msg":"cronlock: tick","job":"b","tick":"2026-12-06T16:01:10Z","outcome":"ran"}
{"time":"2026-12-06T16:01:12.30Z","level":"INFO","msg":"run finished","job":"b","tick":"2026-12-06T16:01:10Z","token":7,"status":"killed by signal terminated","duration":1554000000}
{"time":"2026-12-06T16:01:12.40Z","level":"INFO","msg":"run finished","job":"b","tick":"2026-12-06T16:01:20Z","token":8,"status":"exited with status 0","duration":1000000}
{"time":"2026-12-06T16:01:13.00Z","level":"INFO","msg":"stopping: no new ticks; waiting for running jobs","drain":"12s"}
`
	require.NoError(t, os.WriteFile(filepath.Join(w.h.cfg.Dir, "d3.log"), []byte(log), 0o644))
	l, err := w.readLog()
	require.NoError(t, err)
	tick := time.Date(2026, 12, 6, 16, 1, 10, 0, time.UTC)
	assert.Equal(t, []Outcome{{Job: "b", Replica: "d3", Tick: tick, Outcome: "ran", Fired: tick.Add(100 * ms), Done: tick.Add(100 * ms)}}, l.outcomes)
	assert.Equal(t, []Stop{{Replica: "d3", At: tick.Add(3 * time.Second)}}, l.stops)
	assert.Equal(t, map[runID]bool{{"b", "d3", tick.UnixMilli(), 7}: true}, l.failed, "the command stopped by a signal; not the one that exited 0")
}
