package web

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/scheduler"
)

// The page links each traced run to tracing.ui_url, and shows buttons only with a token.
func TestStatusPageTraceLinksAndButtons(t *testing.T) {
	rec := scheduler.Record{Job: "j", Tick: time.UnixMilli(1_700_000_000_000), Replica: "r1", Outcome: "ran", Token: 7,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	c := &control{cfg: &config.Config{Tracing: config.Tracing{UIURL: "http://jaeger.invalid/trace/{trace_id}"}}}
	for _, controls := range []bool{false, true} {
		var b strings.Builder
		require.NoError(t, statusPage.Execute(&b, pageData{Replica: "r1", Now: time.Now(), Controls: controls, Jobs: []pageJob{{
			Status:  scheduler.Status{Entry: scheduler.Entry{Name: "j", Spec: "@hourly"}},
			Zone:    time.UTC,
			History: []pageRun{c.pageRun(rec)},
		}}}))
		require.Contains(t, b.String(), `<a href="http://jaeger.invalid/trace/4bf92f3577b34da6a3ce929d0e0e4736">4bf92f3577b34da6a3ce929d0e0e4736</a>`)
		require.Equal(t, controls, strings.Contains(b.String(), `action="/jobs/j/trigger"`), "buttons with a token only")
	}
}
