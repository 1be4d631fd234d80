package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/scheduler"
)

// control serves the control endpoints and the console, under the bearer token read from
// the environment variable cfg.HTTPTokenEnv at start (config.Config.HTTPToken).
type control struct {
	cfg      *config.Config        // as the daemon started: token and trace links
	current  func() *config.Config // as last reloaded: the jobs' commands
	sched    *scheduler.Scheduler
	replica  string // sched's name (scheduler.WithReplica)
	status   *JobStatus
	ready    Readiness
	token    string // "": the mutating endpoints and sign-in are off
	off      string // why they are off, and how to turn them on ("" when on)
	sessions *sessions
	jobs     *snapshot[jobsRead]
	replicas *snapshot[replicasRead]
}

func newControl(cfg func() *config.Config, replica string, sched *scheduler.Scheduler, st *JobStatus, ready Readiness) *control {
	c := &control{cfg: cfg(), current: cfg, sched: sched, replica: replica, status: st, ready: ready}
	c.token, c.off = token(c.cfg)
	c.sessions = newSessions(c.token)
	c.jobs = &snapshot[jobsRead]{ttl: PageCache, read: c.readJobs}
	c.replicas = &snapshot[replicasRead]{ttl: PageCache, read: c.readReplicas}
	return c
}

// token returns the bearer token of cfg, or why there is none and how to give one. The daemon
// does not start when http_token_env names a variable that is not set or is empty; this says so
// anyway, should the console ever be served without that check.
func token(cfg *config.Config) (tok, off string) {
	tok, err := cfg.HTTPToken(nil)
	switch {
	case err != nil:
		return "", fmt.Sprintf("the environment variable %s, named by http_token_env, is not set or is empty where the daemon runs: export it with a token and restart the daemon", cfg.HTTPTokenEnv)
	case tok == "":
		return "", "set http_token_env in the config to the name of an environment variable holding a token"
	}
	return tok, ""
}

// mount adds the console (GET /, /jobs/{name}, /jobs/{name}/pause, /login; POST /login,
// /logout), GET /replicas, GET /jobs/{name}/history and POST /jobs/{name}/{pause,resume,trigger,backfill}. The job's
// name is one path segment, path-escaped (url.PathEscape).
func (c *control) mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", c.overview)
	mux.HandleFunc("GET /jobs/{name}", c.jobPage)
	mux.HandleFunc("GET /jobs/{name}/pause", c.pausePage)
	mux.HandleFunc("GET /login", c.loginPage)
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.logout)
	mux.HandleFunc("GET /replicas", c.replicasAPI)
	mux.HandleFunc("GET /jobs/{name}/history", func(w http.ResponseWriter, r *http.Request) {
		n := 20
		if s := r.URL.Query().Get("n"); s != "" {
			v, err := strconv.Atoi(s)
			if err != nil || v <= 0 {
				http.Error(w, "n: give a positive number of runs, e.g. ?n=20", http.StatusBadRequest)
				return
			}
			n = v
		}
		read := c.sched.Control().History
		if c.bearer(r) {
			read = c.sched.Control().HistoryWithOutput // the outputs go with the token, as the command lines
		}
		h, err := read(r.Context(), r.PathValue("name"), n)
		if c.failed(w, err, h == nil, c.bearer(r)) {
			return
		}
		if !c.bearer(r) {
			for i := range h {
				h[i].Error = ""
			}
		}
		writeJSON(w, http.StatusOK, h)
	})
	for _, action := range []string{"pause", "resume", "trigger"} {
		mux.HandleFunc("POST /jobs/{name}/"+action, func(w http.ResponseWriter, r *http.Request) { c.act(w, r, action) })
	}
	mux.HandleFunc("POST /jobs/{name}/backfill", c.backfill)
}

// command returns the command of the job named name in the current config, nil if none.
func (c *control) command(name string) []string {
	for _, j := range c.current().Jobs {
		if j.Name == name {
			return j.Command
		}
	}
	return nil
}

// failed writes err's status and reports whether it did (fatal: err stops the request). The
// error's text (node addresses, node errors) is written only with details: to a request that
// carries the token.
func (c *control) failed(w http.ResponseWriter, err error, fatal, details bool) bool {
	switch {
	case errors.Is(err, scheduler.ErrUnknownJob):
		http.Error(w, err.Error(), http.StatusNotFound)
		return true
	case err != nil && fatal && details:
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return true
	case err != nil && fatal:
		http.Error(w, "the lock nodes could not be read or written (the details go with the bearer token)", http.StatusServiceUnavailable)
		return true
	}
	return false
}

// bearer reports whether r carries the bearer token in its Authorization header.
func (c *control) bearer(r *http.Request) bool {
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	return ok && tokenOK(got, c.token)
}

// authorized checks a request to act: the bearer token in its Authorization header (decided
// on it alone, before the body is read), or else a form of the console, which must come with a
// signed-in session (401 without one, as without the bearer token) and carry the session's CSRF
// token (field csrf; 403 without it or with another). 403 when no token is configured.
func (c *control) authorized(w http.ResponseWriter, r *http.Request) bool {
	if c.token == "" {
		http.Error(w, "control endpoints are off: "+c.off, http.StatusForbidden)
		return false
	}
	if r.Header.Get("Authorization") == "" {
		if err := r.ParseForm(); err != nil {
			formError(w, err)
			return false
		}
		return c.formAuthorized(w, r)
	}
	if !c.bearer(r) {
		unauthorized(w)
		return false
	}
	return true
}

// unauthorized writes 401: neither the bearer token nor a session.
func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="cronlock"`)
	http.Error(w, "wrong or missing bearer token, and no session: send Authorization: Bearer, or sign in at /login", http.StatusUnauthorized)
}

// formAuthorized checks a parsed form of the console: its session, then its CSRF token.
func (c *control) formAuthorized(w http.ResponseWriter, r *http.Request) bool {
	id := c.sessions.session(r, time.Now()).id
	if id == "" {
		unauthorized(w)
		return false
	}
	if !c.sessions.csrfOK(id, r.PostForm.Get("csrf")) {
		http.Error(w, "missing or wrong CSRF token (field csrf): send the form from the console's page (reload it), or use the API with Authorization: Bearer", http.StatusForbidden)
		return false
	}
	return true
}

// operator returns the context of an authorized request r to act, naming who asks
// (scheduler.WithOperator): the name signed in for a form of the console; for the API, the
// form field by if given, else nobody (the scheduler records this replica). For a by that
// schedseam.CheckOperator refuses it writes 400 and returns false.
func (c *control) operator(w http.ResponseWriter, r *http.Request) (context.Context, bool) {
	if r.Header.Get("Authorization") == "" {
		name := c.sessions.session(r, time.Now()).name
		if name == "" { // the session expired since authorized looked
			unauthorized(w)
			return nil, false
		}
		return scheduler.WithOperator(r.Context(), name), true
	}
	if err := r.ParseForm(); err != nil {
		formError(w, err)
		return nil, false
	}
	by := r.PostForm.Get("by")
	if by == "" {
		return r.Context(), true
	}
	if err := schedseam.CheckOperator(by); err != nil {
		http.Error(w, "by: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return scheduler.WithOperator(r.Context(), by), true
}

func (c *control) act(w http.ResponseWriter, r *http.Request, action string) {
	if !c.authorized(w, r) {
		return
	}
	ctx, ok := c.operator(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	var err error
	out := map[string]string{"job": name, "action": action}
	switch action {
	case "pause":
		if err := r.ParseForm(); err != nil {
			formError(w, err)
			return
		}
		reason := r.PostForm.Get("reason") // the body only: a link cannot carry it
		if len(reason) > maxReasonBytes {
			http.Error(w, fmt.Sprintf("reason: %d bytes; give at most %d", len(reason), maxReasonBytes), http.StatusRequestEntityTooLarge)
			return
		}
		if strings.TrimSpace(reason) == "" {
			reason = "paused over HTTP"
		}
		err = c.sched.Control().Pause(ctx, name, reason)
	case "resume":
		err = c.sched.Control().Resume(ctx, name)
	case "trigger":
		out["trigger"], err = c.sched.Control().Trigger(ctx, name)
	}
	if c.failed(w, err, true, true) {
		return
	}
	// The pages show the change at once.
	c.jobs.reset()
	if r.Header.Get("Authorization") == "" { // a button of the console: back to the job's page
		back := "/jobs/" + url.PathEscape(name)
		if id := out["trigger"]; id != "" {
			back += "?trigger=" + url.QueryEscape(id) + "#trigger-" + url.PathEscape(id)
		}
		http.Redirect(w, r, back, http.StatusSeeOther)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
