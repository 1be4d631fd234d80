//go:build unix

package main

import (
	"context"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/web"
)

// browser returns a chromedp context on a headless Chromium (Debian's chromium package;
// scripts/deps.sh installs it), closed at cleanup. On failure the test's screenshot is kept in
// $CRONLOCK_ARTIFACTS (default: the temp dir's cronlock-artifacts).
func browser(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: scripts/deps.sh installs it")
		}
		t.Skip("chromium is not installed (apt-get install chromium, or scripts/deps.sh)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(bctx, 2*proctest.WaitLimit)
	t.Cleanup(func() {
		if t.Failed() {
			sctx, cancel := context.WithTimeout(bctx, 5*time.Second) // ctx may have run out
			defer cancel()
			png, err := chromedp.Run(sctx, chromedp.CaptureScreenshot())
			if err != nil {
				t.Logf("no screenshot: %v", err)
			} else {
				dir := os.Getenv("CRONLOCK_ARTIFACTS")
				if dir == "" {
					dir = filepath.Join(os.TempDir(), "cronlock-artifacts")
				}
				file := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".png")
				if os.MkdirAll(dir, 0o755) == nil && os.WriteFile(file, png, 0o644) == nil {
					t.Logf("screenshot: %s", file)
				}
			}
		}
		cancelTimeout()
		cancelCtx()
		cancelAlloc()
	})
	require.NoError(t, chromedp.Do(bctx)) // starts the browser, for as long as bctx lasts
	return ctx
}

// waitText reloads the page until the text of sel contains want.
func waitText(t *testing.T, ctx context.Context, url, sel, want string) {
	t.Helper()
	deadline := time.Now().Add(proctest.WaitLimit)
	var text string
	for {
		err := chromedp.Do(ctx, chromedp.Navigate(url))
		if err == nil {
			text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		}
		if err == nil && strings.Contains(text, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %q in %s; text: %q, err: %v", proctest.WaitLimit, want, sel, text, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// signIn signs the browser in at base as the operator name, with token.
func signIn(t *testing.T, ctx context.Context, base, name, token string) {
	t.Helper()
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/login"),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name=name]`), name),
		chromedp.SendKeys(chromedp.CSS(`form.login input[name=token]`), token),
		chromedp.Click(chromedp.CSS(`form.login button`)),
		chromedp.WaitVisible(chromedp.CSS(`table.overview`))))
}

// screenshot writes the page at url to $CRONLOCK_SCREENSHOTS/name when that is set
// (docs/observability.md: how to update the console's pictures).
func screenshot(t *testing.T, ctx context.Context, url, name string) {
	t.Helper()
	dir := os.Getenv("CRONLOCK_SCREENSHOTS")
	if dir == "" {
		return
	}
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800), chromedp.Navigate(url)))
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
}

// The console in a real browser: the overview lists every job with its last outcome, the
// failing job first, "never" for a job that never succeeded, a paused job's reason; a job's
// page charts one mark per run; signed in once, the Trigger button leads to a run in the
// history; the session cookie is HttpOnly, SameSite=Strict and expires; the token is in no
// page.
func TestConsoleInBrowser(t *testing.T) {
	t.Setenv("CRONLOCK_PAGE_TOKEN", "pagetoken")
	d := startDaemon(t, "http_token_env: CRONLOCK_PAGE_TOKEN\nmin_interval: 200ms\ntracing: {ui_url: 'http://jaeger.invalid/trace/{trace_id}'}\n", `  - name: nightly
    schedule: "CRON_TZ=Europe/Paris 0 3 * * *"
    command: ["true"]
  - name: often
    schedule: "@every 200ms"
    command: ["sh", "-c", "sleep 0.0$(( $(date +%s%N) % 9 ))"]
  - name: broken
    schedule: "@every 200ms"
    command: ["sh", "-c", "exit 3"]
  - name: zzz-held
    schedule: "@yearly"
    command: ["true"]
`)
	status, body := post(t, d.base+"/jobs/zzz-held/pause", "pagetoken", "reason=maintenance+window")
	require.Equal(t, http.StatusOK, status, body)
	ctx := browser(t)
	waitText(t, ctx, d.base+"/", `#job-often td.last`, "ran")
	waitText(t, ctx, d.base+"/", `#job-broken td.last`, "failed")
	waitText(t, ctx, d.base+"/", `#job-zzz-held td.pause`, "Paused: maintenance window")
	ids, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("table.overview tr.job")].map(r => r.id)`))
	require.NoError(t, err)
	require.Equal(t, []string{"job-broken", "job-zzz-held", "job-nightly", "job-often"}, ids, "failing, then paused, then the rest by name")
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#job-broken td.success`)))
	require.NoError(t, err)
	require.Equal(t, "never", text)
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#job-nightly td.schedule`)))
	require.NoError(t, err)
	require.Equal(t, "CRON_TZ=Europe/Paris 0 3 * * * (Europe/Paris)", text)
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`p.nodes`)))
	require.NoError(t, err)
	require.Contains(t, text, "3 of 3 grant locks, quorum 2 met")
	waitText(t, ctx, d.base+"/?q=OFT", `table.overview`, "often")
	text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`table.overview`)))
	require.NoError(t, err)
	require.NotContains(t, text, "broken", "the filter")

	// A job's page: next ticks in UTC and its zone, one mark per run in the chart.
	waitText(t, ctx, d.base+"/jobs/nightly", `table.ticks`, "CET")
	ticks, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("table.ticks tr").length - 1`))
	require.NoError(t, err)
	require.Equal(t, 5, ticks)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/jobs/often")))
	marks, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("svg.durations rect.bar").length`))
	require.NoError(t, err)
	runs, err := chromedp.Run(ctx, chromedp.Evaluate[int](`[...document.querySelectorAll("table.history td.outcome")].filter(td => td.textContent != "skipped_paused").length`))
	require.NoError(t, err)
	require.Positive(t, runs)
	require.Equal(t, runs, marks, "one mark per run")

	// Sign in once: the cookie's attributes, then a trigger from the job's page.
	screenshot(t, ctx, d.base+"/login", "console-login.png")
	signIn(t, ctx, d.base, "Ada Lovelace", "pagetoken")
	cookies, err := chromedp.Run(ctx, func(ctx context.Context, t *chromedp.Target) ([]*network.Cookie, error) {
		r, err := cdp.Call(ctx, t, network.GetCookies, network.GetCookiesParams{})
		return r.Cookies, err
	})
	require.NoError(t, err)
	require.Len(t, cookies, 1)
	c := cookies[0]
	require.Equal(t, "cronlock_session", c.Name)
	require.True(t, c.HTTPOnly)
	require.Equal(t, network.CookieSameSiteStrict, c.SameSite)
	require.False(t, c.Secure, "plain HTTP on loopback")
	require.False(t, c.Session, "it expires")
	require.WithinDuration(t, time.Now().Add(web.SessionLife), time.Unix(int64(c.Expires), 0), time.Minute)

	// A form without its CSRF token is refused: the browser's, with the hidden field taken out,
	// and a plain client's with the browser's cookie.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/jobs/nightly")))
	_, err = chromedp.Run(ctx, chromedp.Evaluate[bool](`(document.querySelector('form[action$="/trigger"] input[name=csrf]').remove(), true)`))
	require.NoError(t, err)
	resp, err := chromedp.RunResponse(ctx, chromedp.Click(chromedp.CSS(`form[action$="/trigger"] button`)))
	require.NoError(t, err)
	require.EqualValues(t, http.StatusForbidden, resp.Status, "a form without its CSRF token")
	for _, body := range []string{"", "csrf=forged"} {
		req := newRequest(t, "POST", d.base+"/jobs/nightly/trigger", "", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(&http.Cookie{Name: c.Name, Value: c.Value})
		status, page, _ := do(t, req)
		require.Equal(t, http.StatusForbidden, status, "%q: %s", body, page)
	}

	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/jobs/nightly"),
		chromedp.Click(chromedp.CSS(`form[action$="/trigger"] button`)),
		// The page the trigger's answer leads to: the form's post is done (a navigation before
		// then would cancel it; seen in a clean-clone CI run, no run recorded).
		chromedp.WaitVisible(chromedp.CSS(`p.triggered`))))
	waitText(t, ctx, d.base+"/jobs/nightly", `table.history`, "by Ada Lovelace")
	waitText(t, ctx, d.base+"/jobs/nightly", `table.history`, "ran")

	// Pause from the job's page, with a reason; the page shows it.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/jobs/nightly"),
		chromedp.Click(chromedp.CSS(`a.pause`)),
		chromedp.SendKeys(chromedp.CSS(`form.pause input[name=reason]`), "browser test"),
		chromedp.Click(chromedp.CSS(`form.pause button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-nightly .paused`))))
	waitText(t, ctx, d.base+"/jobs/nightly", `.paused`, "Paused: browser test")
	waitText(t, ctx, d.base+"/jobs/nightly", `.paused`, "by Ada Lovelace")
	waitText(t, ctx, d.base+"/", `#job-nightly td.pause`, "by Ada Lovelace")
	waitText(t, ctx, d.base+"/", `header .who`, "signed in as Ada Lovelace")
	code, out, errOut := runCLI(t, "status", "nightly", "--config", d.cfg)
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "by Ada Lovelace: browser test")

	// No page holds the token; the signed-in pages hold the CSRF token in every form.
	for _, path := range []string{"/", "/jobs/nightly", "/jobs/often", "/jobs/nightly/pause", "/login"} {
		require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+path)))
		html, err := chromedp.Run(ctx, chromedp.OuterHTML(chromedp.CSS("html")))
		require.NoError(t, err)
		require.NotContains(t, html, "pagetoken", path)
		require.Equal(t, strings.Count(html, "<form method=\"post\""), strings.Count(html, `name="csrf"`), path)
	}
	screenshot(t, ctx, d.base+"/", "console-overview.png")
	screenshot(t, ctx, d.base+"/jobs/often", "console-job.png")

	// Sign out: the buttons are gone.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.Click(chromedp.CSS(`form[action="/logout"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="/login"]`))))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/jobs/often")))
	buttons, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("form[action$='/trigger']").length`))
	require.NoError(t, err)
	require.Zero(t, buttons)
}

// A job whose name has "/", "..", "%", "?" and "#": its buttons act on it and on no other job
// (its name is one path-escaped segment of their URLs, which the browser does not resolve).
func TestStatusPageOddNames(t *testing.T) {
	t.Setenv("CRONLOCK_PAGE_TOKEN", "pagetoken")
	odd := []string{"x/../prod", "50%/..?q=1#top"}
	d := startDaemon(t, "http_token_env: CRONLOCK_PAGE_TOKEN\n", `  - {name: prod, schedule: "@yearly", command: ["true"]}
  - {name: "x/../prod", schedule: "@yearly", command: ["true"]}
  - {name: "50%/..?q=1#top", schedule: "@yearly", command: ["true"]}
`)
	ctx := browser(t)
	signIn(t, ctx, d.base, "Ada Lovelace", "pagetoken")
	row := func(name string) string { return `tr[id="job-` + name + `"]` }
	for _, name := range odd {
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Navigate(d.base+"/"),
			chromedp.Click(chromedp.CSS(row(name)+` td.name a`)),
			chromedp.Click(chromedp.CSS(`a.pause`)),
			chromedp.SendKeys(chromedp.CSS(`form.pause input[name=reason]`), "paused "+name),
			chromedp.Click(chromedp.CSS(`form.pause button`)),
			chromedp.WaitVisible(chromedp.CSS(`.paused`))))
		waitText(t, ctx, d.base+"/", row(name)+` td.pause`, "Paused: paused "+name)
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.Click(chromedp.CSS(row(odd[0])+` td.name a`)),
		chromedp.Click(chromedp.CSS(`form[action$="/trigger"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`p.triggered`))))
	url, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(t, err)
	// Back on the job's own page, which names the manual run and links its row (#trigger-ID).
	// waitText reloads the page without the fragment: a navigation to the same address with
	// one would not reload it.
	page, id, ok := strings.Cut(url, "?trigger=")
	require.True(t, ok, url)
	require.Equal(t, d.base+"/jobs/"+neturl.PathEscape(odd[0]), page)
	id, _, _ = strings.Cut(id, "#")
	waitText(t, ctx, page+"?trigger="+id, `table.history`, "trigger "+id)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/jobs/prod")))
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("section.job")))
	require.NoError(t, err)
	require.Contains(t, text, "Not paused")
	require.Contains(t, text, "No runs recorded yet.")
}
