package web

import (
	"context"
	"embed"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/scheduler"
)

//go:embed templates/status.html
var templates embed.FS

var statusPage = template.Must(template.New("status.html").Funcs(template.FuncMap{
	"utc":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
	"in":   func(t time.Time, loc *time.Location) string { return t.In(loc).Format("2006-01-02 15:04:05 MST") },
	"ms":   func(d time.Duration) string { return d.Round(time.Millisecond).String() },
	"run":  history.RunName,
	"zero": func(t time.Time) bool { return t.IsZero() },
	"path": url.PathEscape,
}).ParseFS(templates, "templates/status.html"))

// pageJob is one job on the status page.
type pageJob struct {
	scheduler.Status
	Zone    *time.Location
	History []pageRun
	Err     string // the nodes could not be read
}

type pageRun struct {
	scheduler.Record
	TraceURL string
}

// page serves the status page: every job with its schedule, next tick, pause and last runs,
// from a read of the nodes shared by every request of the last PageCache. Error texts are
// shown only to a request with the bearer token.
func (c *control) page(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_ = statusPage.Execute(w, pageData{Replica: c.sched.Replica(), Now: time.Now(), Controls: c.token != "",
		Details: c.bearer(r), Jobs: c.jobs.get(r.Context())})
}

// readJobs reads every job's status and last runs from the nodes, for the page.
func (c *control) readJobs(ctx context.Context) []pageJob {
	var jobs []pageJob
	for _, e := range c.sched.Entries() {
		pj := pageJob{Zone: specZone(e.Spec)}
		st, err := c.sched.Status(ctx, e.Name)
		pj.Status, pj.Entry = st, e
		if err == nil {
			var h []scheduler.Record
			h, err = c.sched.History(ctx, e.Name, 10)
			for _, rec := range h {
				pj.History = append(pj.History, c.pageRun(rec))
			}
		}
		if err != nil {
			pj.Err = err.Error()
		}
		jobs = append(jobs, pj)
	}
	return jobs
}

// pageData is what the template shows.
type pageData struct {
	Replica  string
	Now      time.Time
	Controls bool // a token is set: show the buttons
	Details  bool // the request carries the token: show error texts
	Jobs     []pageJob
}

// pageRun is rec with its trace's URL, when tracing.ui_url is set.
func (c *control) pageRun(rec scheduler.Record) pageRun {
	pr := pageRun{Record: rec}
	if c.cfg.Tracing.UIURL != "" && rec.TraceID != "" {
		pr.TraceURL = strings.ReplaceAll(c.cfg.Tracing.UIURL, "{trace_id}", rec.TraceID)
	}
	return pr
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
