//go:build unix

package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
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

// The status page in a real browser: it shows the jobs; the Trigger button leads to a run in
// the history; the Pause button shows the pause, and the next tick is skipped_paused.
func TestStatusPageInBrowser(t *testing.T) {
	t.Setenv("CRONLOCK_PAGE_TOKEN", "pagetoken")
	d := startDaemon(t, "http_token_env: CRONLOCK_PAGE_TOKEN\ntracing: {ui_url: 'http://jaeger.invalid/trace/{trace_id}'}\n", `  - name: nightly
    schedule: "CRON_TZ=Europe/Paris 0 3 * * *"
    command: ["true"]
  - name: often
    schedule: "@every 1s"
    command: ["true"]
`)
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(d.base+"/")))
	body, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	require.NoError(t, err)
	for _, want := range []string{"nightly", "CRON_TZ=Europe/Paris 0 3 * * *", "CET", "often", "@every 1s", "Not paused", "web-1"} {
		require.Contains(t, body, want)
	}

	// Trigger the nightly job from its button: the manual run shows in its history.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`#job-nightly form[action$="/trigger"] input[name=token]`), "pagetoken"),
		chromedp.Click(chromedp.CSS(`#job-nightly form[action$="/trigger"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-nightly`))))
	waitText(t, ctx, d.base+"/", `#job-nightly table.history`, "trigger ")
	waitText(t, ctx, d.base+"/", `#job-nightly table.history`, "ran")

	// Pause the frequent job from its button: the page shows it, and its next tick is skipped.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.SendKeys(chromedp.CSS(`#job-often form[action$="/pause"] input[name=token]`), "pagetoken"),
		chromedp.SendKeys(chromedp.CSS(`#job-often form[action$="/pause"] input[name=reason]`), "browser test"),
		chromedp.Click(chromedp.CSS(`#job-often form[action$="/pause"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`#job-often .paused`))))
	waitText(t, ctx, d.base+"/", `#job-often .paused`, "Paused: browser test")
	waitText(t, ctx, d.base+"/", `#job-often table.history`, "skipped_paused")

	// A wrong token is refused, and the page says so.
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.SendKeys(chromedp.CSS(`#job-often form[action$="/resume"] input[name=token]`), "wrong"),
		chromedp.Click(chromedp.CSS(`#job-often form[action$="/resume"] button`))))
	require.Eventually(t, func() bool {
		body, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
		return err == nil && strings.Contains(body, "wrong or missing bearer token")
	}, proctest.WaitLimit, 50*time.Millisecond)
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
	section := func(name string) string { return `section[id="job-` + name + `"]` }
	for _, name := range odd {
		require.NoError(t, chromedp.Do(ctx,
			chromedp.Navigate(d.base+"/"),
			chromedp.SendKeys(chromedp.CSS(section(name)+` form[action$="/pause"] input[name=token]`), "pagetoken"),
			chromedp.SendKeys(chromedp.CSS(section(name)+` form[action$="/pause"] input[name=reason]`), "paused "+name),
			chromedp.Click(chromedp.CSS(section(name)+` form[action$="/pause"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`body`))))
		waitText(t, ctx, d.base+"/", section(name)+` .paused`, "Paused: paused "+name)
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(d.base+"/"),
		chromedp.SendKeys(chromedp.CSS(section(odd[0])+` form[action$="/trigger"] input[name=token]`), "pagetoken"),
		chromedp.Click(chromedp.CSS(section(odd[0])+` form[action$="/trigger"] button`)),
		chromedp.WaitVisible(chromedp.CSS(`body`))))
	waitText(t, ctx, d.base+"/", section(odd[0])+` table.history`, "trigger ")
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(section("prod"))))
	require.NoError(t, err)
	require.Contains(t, text, "Not paused")
	require.Contains(t, text, "No runs recorded yet.")
}
