//go:build unix

package main

import (
	"fmt"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
)

// The console's controls and times, signed in: each overview row has Trigger and Pause… (or
// Resume); a trigger lands on the job's page with its id, linked to its run once the run is
// in the history; a UTC job's next ticks have one time column, each with how long until it,
// and say they will be skipped while the job is paused; the job's command shows only signed in.
func TestConsoleControlsAndTimes(t *testing.T) {
	t.Setenv("CRONLOCK_PAGE_TOKEN", "pagetoken")
	d := startDaemon(t, "http_token_env: CRONLOCK_PAGE_TOKEN\n", `  - name: report
    schedule: "0 0 * * * *"
    command: ["sh", "-c", "echo \"it's done\""]
  - name: paris
    schedule: "CRON_TZ=Europe/Paris 0 3 * * *"
    command: ["true"]
`)
	ctx := browser(t)

	// Signed out: no command, no actions.
	waitText(t, ctx, d.base+"/jobs/report", `table.ticks`, "in ")
	html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
	require.NoError(t, err)
	require.NotContains(t, html, `class="command"`)
	require.NotContains(t, html, `echo`)

	signIn(t, ctx, d.base, "Grace Hopper", "pagetoken")
	actions, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.overview tr.job td.actions")].map(td => td.innerText.trim())`))
	require.NoError(t, err)
	require.Equal(t, []string{"Trigger Pause…", "Trigger Pause…"}, actions)

	// A trigger from the overview's row: the job's page names the run and links it.
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`#job-report td.actions form[action$="/trigger"] button`)))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusOK, resp.Status)
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	m := regexp.MustCompile(`/jobs/report\?trigger=([0-9a-f-]+)#trigger-([0-9a-f-]+)$`).FindStringSubmatch(url)
	require.NotNil(t, m, url)
	require.Equal(t, m[1], m[2])
	id := m[1]
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`p.triggered`)))
	require.NoError(t, err)
	require.Contains(t, text, "Manual run "+id+" asked")
	waitText(t, ctx, d.base+"/jobs/report?trigger="+id, `#trigger-`+id, "ran")

	// The command, signed in; one time column for a UTC job, two for another zone.
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`p.command`)))
	require.NoError(t, err)
	require.Equal(t, `Command: sh -c 'echo "it'\''s done"'`, text)
	headers, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.ticks th")].map(th => th.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"Next ticks (UTC)", "When"}, headers)
	whens, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.ticks td.when")].map(td => td.textContent)`))
	require.NoError(t, err)
	require.Len(t, whens, 5)
	for _, w := range whens {
		require.Regexp(t, `^in (\d+h)?(\d+m)?(\d+s)?$`, w)
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/jobs/paris")))
	headers, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.ticks th")].map(th => th.textContent)`))
	require.NoError(t, err)
	require.Equal(t, []string{"Next ticks (UTC)", "In Europe/Paris", "When"}, headers)

	// Paused from the overview's row: its ticks say they will be skipped; Resume from the row.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.Click(chromedp.CSS(`#job-paris td.actions a.pause`)),
		chromedp.SendKeys(chromedp.CSS(`form.pause input[name=reason]`), "quiet night"),
		chromedp.Click(chromedp.CSS(`form.pause button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-paris .paused`))))
	whens, err = chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.ticks tr.skipped td.when")].map(td => td.textContent)`))
	require.NoError(t, err)
	require.Len(t, whens, 5)
	for _, w := range whens {
		require.True(t, strings.HasSuffix(w, ": skipped, the job is paused"), w)
	}
	screenshot(t, ctx, d.base+"/jobs/paris", "console-paused-job.png")
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/")))
	screenshot(t, ctx, d.base+"/", "console-overview-signed-in.png")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.Click(chromedp.CSS(`#job-paris td.actions form[action$="/resume"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-paris p.running`))))
}

// A job's history filtered by outcome in a real browser: a job whose runs fail and succeed in
// turn has a link per outcome above its history; following "failed" shows only its failed
// records, with "failed" in bold and a link back to all of them, which shows both again.
func TestConsoleHistoryByOutcomeInBrowser(t *testing.T) {
	count := filepath.Join(t.TempDir(), "count")
	d := startDaemon(t, "min_interval: 200ms\n", fmt.Sprintf(`  - name: flaky
    schedule: "@every 200ms"
    command: ["sh", "-c", "n=$(cat %[1]s 2>/dev/null || echo 0); echo $((n + 1)) > %[1]s; [ $((n %% 2)) = 0 ]"]
`, count))
	ctx := browser(t)
	waitText(t, ctx, d.base+"/jobs/flaky", `p.outcomes`, "failed")
	waitText(t, ctx, d.base+"/jobs/flaky", `p.outcomes`, "ran")
	outcomes := func() []string {
		t.Helper()
		got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.history td.outcome")].map(td => td.textContent)`))
		require.NoError(t, err)
		return got
	}
	proctest.Eventually(t, "three failed runs and three that ran", func() bool {
		if err := chromedp.Do(ctx, chromedp.Navigate(d.base+"/jobs/flaky")); err != nil {
			return false
		}
		n := map[string]int{}
		for _, o := range outcomes() {
			n[o]++
		}
		return n["failed"] >= 3 && n["ran"] >= 3
	})

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`p.outcomes a.failed`)),
		chromedp.WaitVisible(chromedp.CSS(`p.outcomes b.failed`))))
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(url, "/jobs/flaky?outcome=failed"), url)
	got := outcomes()
	require.NotEmpty(t, got)
	for _, o := range got {
		require.Equal(t, "failed", o, "only the failed records: %q", got)
	}
	screenshot(t, ctx, d.base+"/jobs/flaky?outcome=failed", "console-history-failed.png")

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`p.outcomes a[href="/jobs/flaky"]`)),
		chromedp.WaitVisible(chromedp.CSS(`p.outcomes a.failed`))))
	require.Contains(t, outcomes(), "ran", "all the records again")
}
