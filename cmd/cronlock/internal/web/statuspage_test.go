package web

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/scheduler"
)

// A job's page links each traced run to tracing.ui_url, and shows buttons, each form with the
// CSRF token, only to a signed-in request.
func TestJobPageTraceLinksAndButtons(t *testing.T) {
	rec := scheduler.Record{Job: "j", Tick: time.UnixMilli(1_700_000_000_000), Replica: "r1", Outcome: "ran", Token: 7,
		TraceID: "4bf92f3577b34da6a3ce929d0e0e4736"}
	c := &control{cfg: &config.Config{Tracing: config.Tracing{UIURL: "http://jaeger.invalid/trace/{trace_id}"}}}
	for _, signedIn := range []bool{false, true} {
		var b strings.Builder
		d := pageData{Replica: "r1", Now: time.Now(), Controls: true, SignedIn: signedIn, Job: &pageJob{
			Status:  scheduler.Status{Entry: scheduler.Entry{Name: "j", Spec: "@hourly"}},
			Zone:    time.UTC,
			History: []pageRun{c.pageRun(rec)},
		}}
		if signedIn {
			d.CSRF = "csrf-value"
		}
		require.NoError(t, pages["job.html"].Execute(&b, d))
		require.Contains(t, b.String(), `<a href="http://jaeger.invalid/trace/4bf92f3577b34da6a3ce929d0e0e4736">4bf92f3577b34da6a3ce929d0e0e4736</a>`)
		require.Equal(t, signedIn, strings.Contains(b.String(), `action="/jobs/j/trigger"`), "buttons when signed in only")
		require.Equal(t, strings.Count(b.String(), "<form"), strings.Count(b.String(), `<input type="hidden" name="csrf" value="csrf-value">`), "every form carries the CSRF token")
	}
}

// The chart has one bar per run, oldest on the left, the longest as tall as the chart.
func TestDurationChart(t *testing.T) {
	runs := []pageRun{ // newest first
		{Record: scheduler.Record{Outcome: "failed", Duration: time.Second}},
		{Record: scheduler.Record{Outcome: "ran", Duration: 2 * time.Second}},
		{Record: scheduler.Record{Outcome: "ran", Duration: 0}},
	}
	c := durationChart(runs)
	require.Len(t, c.Bars, 3)
	require.Equal(t, "ran", c.Bars[0].Outcome)
	require.Zero(t, c.Bars[0].X)
	require.Equal(t, 1.0, c.Bars[0].H, "a run of no time still gets a mark")
	require.Equal(t, float64(chartHeight), c.Bars[1].H)
	require.Equal(t, "failed", c.Bars[2].Outcome)
	require.Equal(t, float64(chartHeight)/2, c.Bars[2].H)
	require.Equal(t, "2s", c.Longest)
}
