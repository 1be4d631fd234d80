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

// A job whose spec has H shows the resolved schedule, with the spec as written, and its jitter,
// on its page (with each next tick's delayed start) and in the overview; a delayed tick's run
// has its delay beside the tick.
func TestPagesShowResolvedScheduleAndJitter(t *testing.T) {
	at := time.Date(2026, 12, 5, 14, 33, 0, 0, time.UTC)
	rec := scheduler.Record{Job: "backup", Tick: at, PlannedStart: at.Add(7250 * time.Millisecond), Replica: "r1", Outcome: "ran"}
	j := &pageJob{
		Status:  scheduler.Status{Entry: scheduler.Entry{Name: "backup", Spec: "H H * * *", Schedule: "33 14 * * *", Jitter: 10 * time.Minute}},
		Zone:    time.UTC,
		History: []pageRun{{Record: rec, Attempts: 1}},
	}
	var b strings.Builder
	d := pageData{Replica: "r1", Now: time.Now(), Job: j, Ticks: []tick{{UTC: "2026-12-05 14:33:00 UTC", Zone: "2026-12-05 14:33:00 UTC", Start: "2026-12-05 14:40:21.986 UTC"}}}
	require.NoError(t, pages["job.html"].Execute(&b, d))
	page := b.String()
	require.Contains(t, page, "Schedule <code>33 14 * * *</code> (written <code>H H * * *</code>, H hashed from the job's name)")
	require.Contains(t, page, "Each tick starts up to 10m0s after its instant (jitter).")
	require.Contains(t, page, "<th>Starts (UTC)</th>")
	require.Contains(t, page, "<td>2026-12-05 14:40:21.986 UTC</td>")
	require.Contains(t, page, "tick 14:33:00.000 &#43;7.25s")

	b.Reset()
	require.NoError(t, pages["overview.html"].Execute(&b, pageData{Replica: "r1", Now: time.Now(), Rows: []overviewRow{{pageJob: j}}, Total: 1}))
	require.Contains(t, b.String(), `<code>33 14 * * *</code> <span class="muted">from <code>H H * * *</code></span> <span class="muted">jitter 10m0s</span>`)
}

func TestRelative(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{400 * time.Millisecond, "now"},
		{5 * time.Second, "in 5s"},
		{-5 * time.Second, "5s ago"},
		{3*time.Minute + 20*time.Second, "in 3m20s"},
		{-(2*time.Hour + 5*time.Minute + 7*time.Second), "2h5m ago"},
		{2*time.Hour + 7*time.Second, "in 2h0m"},
		{51 * time.Hour, "in 2d3h"},
	} {
		require.Equal(t, tc.want, relative(now, now.Add(tc.d)), "%v", tc.d)
	}
}

func TestArgv(t *testing.T) {
	require.Equal(t, `sh -c 'echo "$X" it'\''s' /usr/bin/x --n=3 ''`, argv([]string{"sh", "-c", `echo "$X" it's`, "/usr/bin/x", "--n=3", ""}))
}

// A job's history filtered by outcome: the records with it only, a tick's attempts still
// grouped, and links to every outcome the history has.
func TestJobPageHistoryByOutcome(t *testing.T) {
	a, b := time.UnixMilli(1_700_000_060_000), time.UnixMilli(1_700_000_000_000)
	recs := []scheduler.Record{ // newest first
		{Job: "j", Tick: a, Attempt: 2, Replica: "r2", Outcome: "failed", Token: 9},
		{Job: "j", Tick: a, Attempt: 1, Replica: "r1", Outcome: "failed", Token: 8},
		{Job: "j", Tick: b, Attempt: 1, Replica: "r1", Outcome: "ran", Token: 7},
	}
	c := &control{cfg: &config.Config{}}
	j := &pageJob{Status: scheduler.Status{Entry: scheduler.Entry{Name: "j", Spec: "@hourly"}}, Zone: time.UTC, History: c.pageRuns(recs)}
	render := func(outcome string) string {
		d := pageData{Replica: "r1", Now: time.Now(), Outcome: outcome}
		d.Job, d.Outcomes = c.withOutcome(j, outcome)
		var b strings.Builder
		require.NoError(t, pages["job.html"].Execute(&b, d))
		return b.String()
	}

	page := render("failed")
	require.Contains(t, page, `Show: <a href="/jobs/j">all</a> · <b class="failed">failed</b> · <a class="ran" href="/jobs/j?outcome=ran">ran</a>`)
	require.Equal(t, 2, strings.Count(page, `<td class="outcome failed">`))
	require.NotContains(t, page, `<td class="outcome ran">`)
	require.Contains(t, page, `rowspan="2"`, "the tick's two attempts, grouped")
	require.Len(t, j.History, 3, "the shared read is left alone")

	page = render("")
	require.Contains(t, page, `Show: <b>all</b> · <a class="failed" href="/jobs/j?outcome=failed">failed</a> · <a class="ran" href="/jobs/j?outcome=ran">ran</a>`)
	require.Equal(t, 3, strings.Count(page, `<td class="outcome `))
	require.Contains(t, render("nope"), "No record with outcome “nope”.")
}
