package web

import (
	"cmp"
	"context"
	"embed"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/scheduler"
)

//go:embed templates/*.html
var templates embed.FS

// pages are the console's pages, each a template of its own over layout.html's "head" and
// "foot".
var pages = func() map[string]*template.Template {
	funcs := template.FuncMap{
		"utc":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
		"in":   func(t time.Time, loc *time.Location) string { return t.In(loc).Format("2006-01-02 15:04:05 MST") },
		"ms":   func(d time.Duration) string { return d.Round(time.Millisecond).String() },
		"run":  history.RunName,
		"zero": func(t time.Time) bool { return t.IsZero() },
		"path": url.PathEscape,
		"rel":  relative,
		"argv": argv,
	}
	out := map[string]*template.Template{}
	for _, name := range []string{"overview.html", "job.html", "pause.html", "login.html"} {
		out[name] = template.Must(template.New(name).Funcs(funcs).ParseFS(templates, "templates/layout.html", "templates/"+name))
	}
	return out
}()

const (
	// recentRuns is how many of a job's last runs the overview counts the failures of.
	recentRuns = 10
	// nextTicks is how many of a job's next ticks its page shows.
	nextTicks = 5
	// refreshSeconds is how often the overview and the job pages reload themselves.
	refreshSeconds = 10
)

// pageJob is one job as the console shows it, from one read of the nodes.
type pageJob struct {
	scheduler.Status
	Zone    *time.Location
	History []pageRun // every record the nodes keep, newest first
	Err     string    // the nodes could not be read
}

type pageRun struct {
	scheduler.Record
	TraceURL string
	// Attempts is, on the newest record of a tick or manual run, how many records of it follow
	// one another in the history (its attempts); 0 on the others, shown under it.
	Attempts int
}

// jobsRead is one read of every job's state, for every page of the next PageCache.
type jobsRead struct {
	jobs   []pageJob
	byName map[string]int
}

// readJobs reads every job's status and history from the nodes (Control.Status: one read of
// the nodes per job).
func (c *control) readJobs(ctx context.Context) jobsRead {
	read := jobsRead{byName: map[string]int{}}
	for _, e := range c.sched.Entries() {
		pj := pageJob{Zone: specZone(e.Spec)}
		st, err := c.sched.Control().Status(ctx, e.Name)
		pj.Status, pj.Entry, pj.History = st, e, c.pageRuns(st.History)
		if err != nil {
			pj.Err = err.Error()
		}
		read.byName[e.Name] = len(read.jobs)
		read.jobs = append(read.jobs, pj)
	}
	return read
}

// pageRuns returns the records recs as the pages show them: with their trace links, and the
// attempts of each tick grouped under its newest record (Attempts).
func (c *control) pageRuns(recs []scheduler.Record) []pageRun {
	out := make([]pageRun, 0, len(recs))
	first := 0 // the newest record of the tick under way
	for i, rec := range recs {
		if i == 0 || !sameRun(rec, recs[first]) {
			first = i
		}
		out = append(out, c.pageRun(rec))
		out[first].Attempts++
	}
	return out
}

// withOutcome returns a copy of j whose history holds only the records with outcome (all of
// them for ""), and the outcomes its whole history has, by name. j itself, shared by the pages
// of one read, is left alone.
func (c *control) withOutcome(j *pageJob, outcome string) (*pageJob, []string) {
	var present []string
	var recs []scheduler.Record
	for _, r := range j.History {
		if !slices.Contains(present, r.Outcome) {
			present = append(present, r.Outcome)
		}
		if r.Outcome == outcome {
			recs = append(recs, r.Record)
		}
	}
	slices.Sort(present)
	if outcome == "" {
		return j, present
	}
	cp := *j
	cp.History = c.pageRuns(recs)
	return &cp, present
}

// sameRun reports whether a and b are records of the same tick or manual run.
func sameRun(a, b scheduler.Record) bool {
	return a.Tick.Equal(b.Tick) && a.Trigger == b.Trigger && a.Backfill == b.Backfill
}

// pageRun is rec with its trace's URL, when tracing.ui_url is set.
func (c *control) pageRun(rec scheduler.Record) pageRun {
	pr := pageRun{Record: rec}
	if c.cfg.Tracing.UIURL != "" && rec.TraceID != "" {
		pr.TraceURL = strings.ReplaceAll(c.cfg.Tracing.UIURL, "{trace_id}", rec.TraceID)
	}
	return pr
}

// withOutputs returns a copy of j whose history has the output each run kept, read from the
// nodes (Control.HistoryWithOutput); j itself, shared by the pages of one read, is left
// alone. When the nodes cannot be read, it returns j.
func (c *control) withOutputs(ctx context.Context, j *pageJob) *pageJob {
	if len(j.History) == 0 {
		return j
	}
	h, _ := c.sched.Control().HistoryWithOutput(ctx, j.Name, len(j.History)) // a failed read shows on the page already
	if h == nil {
		return j
	}
	type run struct {
		tick    int64
		trigger string
		token   uint64
		outcome string
	}
	outputs := map[run]string{}
	for _, rec := range h {
		outputs[run{rec.Tick.UnixMilli(), rec.Trigger, rec.Token, rec.Outcome}] = rec.Output
	}
	cp := *j
	cp.History = slices.Clone(j.History)
	for i, rec := range cp.History {
		cp.History[i].Output = outputs[run{rec.Tick.UnixMilli(), rec.Trigger, rec.Token, rec.Outcome}]
	}
	return &cp
}

// runs returns the job's records of runs (not of paused ticks), newest first.
func (j *pageJob) runs() []pageRun {
	return slices.DeleteFunc(slices.Clone(j.History), func(r pageRun) bool { return r.Outcome == outcome.SkippedPaused })
}

// failure reports whether a run's outcome is a failure.
func failure(o string) bool {
	return o == outcome.Failed || o == outcome.LeaseLost || o == outcome.Interrupted
}

// pageData is what every page shows, and what one page needs.
type pageData struct {
	Title    string
	Replica  string
	Now      time.Time
	Refresh  int    // seconds; 0: the page does not reload itself (it has a field to type in)
	Controls bool   // a token is set: sign-in and the buttons are on
	SignedIn bool   // the request comes with a session: show the buttons
	CSRF     string // the session's CSRF token, for every form
	Name     string // the signed-in operator's name; the sign-in page: the name typed
	Details  bool   // the request carries the token or a session: show error texts
	Nodes    nodes.Status

	Rows     []overviewRow       // the overview
	Replicas []scheduler.Replica // the overview's replicas panel
	ReplErr  string              // the replicas could not be read (by a quorum)
	Filter   string
	Sort     string
	Total    int

	Job      *pageJob // a job's page
	Ticks    []tick
	Chart    chart
	Command  []string // the job's command, shown with Details
	Trigger  string   // the manual run just asked for from the page (?trigger=)
	Outcome  string   // the history shows only the records with this outcome (?outcome=)
	Outcomes []string // the outcomes of the job's history, to filter by

	Error string // the sign-in page: why the last attempt failed
}

// tick is one of a job's next ticks.
type tick struct {
	UTC, Zone string
	Start     string // with the tick's jitter delay, when the job has one
	In        string // how long until it, e.g. "in 3m20s"
}

// argv writes a command line as a shell would read it back: each argument as it is, or
// single-quoted when it holds anything but letters, digits and -_./=:,+@%.
func argv(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

// relative says how far t is from now, to the second: "in 3m20s", "5s ago", "in 2d3h" (days
// and hours past two days), "now".
func relative(now, t time.Time) string {
	d := t.Sub(now).Round(time.Second)
	ago := d < 0
	if ago {
		d = -d
	}
	var s string
	switch {
	case d == 0:
		return "now"
	case d >= 48*time.Hour:
		s = fmt.Sprintf("%dd%dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		s = strings.TrimSuffix(d.Truncate(time.Minute).String(), "0s")
	default:
		s = d.String()
	}
	if ago {
		return s + " ago"
	}
	return "in " + s
}

// data returns what every page of r shows.
func (c *control) data(r *http.Request, title string) pageData {
	d := pageData{Title: title, Replica: c.replica, Now: time.Now(), Controls: c.token != "", Details: c.bearer(r)}
	if si := c.sessions.session(r, d.Now); si.id != "" {
		d.SignedIn, d.CSRF, d.Details, d.Name = true, c.sessions.csrf(si.id), true, si.name
	}
	return d
}

// render writes the page name with d.
func render(w http.ResponseWriter, code int, name string, d pageData) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = pages[name].Execute(w, d)
}

// overviewRow is one job in the overview's table.
type overviewRow struct {
	*pageJob
	Failures, Runs int // failures among the last recentRuns runs
	Attention      int // 0: the last run failed or the nodes could not be read; 1: paused; 2: the rest
}

// overview serves GET /: one table of every job (filtered by ?q=, a part of the name), failing
// and paused jobs first (or ?sort=name, next, success), and the nodes' state above it.
func (c *control) overview(w http.ResponseWriter, r *http.Request) {
	d := c.data(r, "cronlock")
	d.Refresh, d.Nodes = refreshSeconds, c.ready(r.Context(), d.Details)
	d.Filter, d.Sort = r.URL.Query().Get("q"), r.URL.Query().Get("sort")
	repl := c.replicas.get(r.Context())
	d.Replicas, d.ReplErr = repl.replicas, repl.err
	read := c.jobs.get(r.Context())
	d.Total = len(read.jobs)
	for i := range read.jobs {
		j := &read.jobs[i]
		if !strings.Contains(strings.ToLower(j.Name), strings.ToLower(d.Filter)) {
			continue
		}
		row := overviewRow{pageJob: j, Attention: 2}
		runs := j.runs()
		row.Runs = min(len(runs), recentRuns)
		for _, run := range runs[:row.Runs] {
			if failure(run.Outcome) {
				row.Failures++
			}
		}
		switch {
		case j.Err != "", j.LastRun != nil && failure(j.LastRun.Outcome):
			row.Attention = 0
		case j.Paused != nil:
			row.Attention = 1
		}
		d.Rows = append(d.Rows, row)
	}
	slices.SortStableFunc(d.Rows, func(a, b overviewRow) int {
		switch d.Sort {
		case "name":
			return strings.Compare(a.Name, b.Name)
		case "next":
			return cmp.Compare(a.Next.UnixNano(), b.Next.UnixNano())
		case "success":
			return cmp.Compare(successTime(a.pageJob), successTime(b.pageJob))
		}
		return cmp.Or(cmp.Compare(a.Attention, b.Attention), -cmp.Compare(a.Failures, b.Failures), strings.Compare(a.Name, b.Name))
	})
	render(w, http.StatusOK, "overview.html", d)
}

// successTime is when the job last succeeded, in Unix nanoseconds; 0 for never (sorted first).
func successTime(j *pageJob) int64 {
	if j.LastSuccess == nil {
		return 0
	}
	return j.LastSuccess.Start.UnixNano()
}

// job returns the job of r's path from the last read, or writes 404.
func (c *control) job(w http.ResponseWriter, r *http.Request) *pageJob {
	read := c.jobs.get(r.Context())
	i, ok := read.byName[r.PathValue("name")]
	if !ok {
		http.Error(w, fmt.Sprintf("no job named %q runs here (GET /jobs lists them)", r.PathValue("name")), http.StatusNotFound)
		return nil
	}
	return &read.jobs[i]
}

// jobPage serves GET /jobs/{name}: the job's schedule and next ticks, pause, history and a
// chart of its runs' durations.
func (c *control) jobPage(w http.ResponseWriter, r *http.Request) {
	d := c.data(r, r.PathValue("name")+" — cronlock")
	d.Refresh, d.Nodes = refreshSeconds, c.ready(r.Context(), d.Details)
	j := c.job(w, r)
	if j == nil {
		return
	}
	if d.Details {
		j = c.withOutputs(r.Context(), j)
	}
	d.Chart, d.Trigger, d.Outcome = durationChart(j.runs()), r.URL.Query().Get("trigger"), r.URL.Query().Get("outcome")
	d.Job, d.Outcomes = c.withOutcome(j, d.Outcome)
	if d.Details {
		d.Command = c.command(j.Name)
	}
	if sched, err := scheduler.ParseSpec(j.Schedule, time.UTC); err == nil && !j.Next.IsZero() {
		for t := j.Next; !t.IsZero() && len(d.Ticks) < nextTicks; t = sched.Next(t) {
			tk := tick{UTC: t.UTC().Format("2006-01-02 15:04:05 MST"), Zone: t.In(j.Zone).Format("2006-01-02 15:04:05 MST"), In: relative(d.Now, t)}
			if j.Jitter > 0 {
				tk.Start = t.Add(tickmath.JitterDelay(j.Name, t, j.Jitter)).UTC().Format("2006-01-02 15:04:05.000 MST")
			}
			d.Ticks = append(d.Ticks, tk)
		}
	}
	render(w, http.StatusOK, "job.html", d)
}

// pausePage serves GET /jobs/{name}/pause: the form that asks for a pause's reason (a page of
// its own, which does not reload while the reason is typed).
func (c *control) pausePage(w http.ResponseWriter, r *http.Request) {
	d := c.data(r, "pause "+r.PathValue("name")+" — cronlock")
	if !d.SignedIn {
		http.Redirect(w, r, "/login", http.StatusSeeOther)
		return
	}
	if j := c.job(w, r); j != nil {
		d.Job = j
		render(w, http.StatusOK, "pause.html", d)
	}
}

// specZone returns the zone of a spec's CRON_TZ= or TZ= prefix, else UTC (the daemon's).
func specZone(spec string) *time.Location {
	for _, p := range []string{"CRON_TZ=", "TZ="} {
		if rest, ok := strings.CutPrefix(spec, p); ok {
			name, _, _ := strings.Cut(rest, " ")
			if loc, err := time.LoadLocation(name); err == nil {
				return loc
			}
		}
	}
	return time.UTC
}
