package web

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/scheduler"
)

// control serves the control endpoints and the status page, under the bearer token read from
// the environment variable cfg.HTTPTokenEnv at start.
type control struct {
	cfg   *config.Config
	sched *scheduler.Scheduler
	token string // "": the mutating endpoints are off
	jobs  *snapshot[[]pageJob]
}

func newControl(cfg *config.Config, sched *scheduler.Scheduler) *control {
	c := &control{cfg: cfg, sched: sched}
	if cfg.HTTPTokenEnv != "" {
		c.token = os.Getenv(cfg.HTTPTokenEnv)
	}
	c.jobs = &snapshot[[]pageJob]{ttl: PageCache, read: c.readJobs}
	return c
}

// mount adds GET /, GET /jobs/{name}/history and POST /jobs/{name}/{pause,resume,trigger,backfill}.
// The job's name is one path segment, path-escaped (url.PathEscape).
func (c *control) mount(mux *http.ServeMux) {
	mux.HandleFunc("GET /{$}", c.page)
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
		h, err := c.sched.History(r.Context(), r.PathValue("name"), n)
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
	return ok && c.token != "" && subtle.ConstantTimeCompare([]byte(got), []byte(c.token)) == 1
}

// authorized checks the bearer token (the Authorization header, or else the form field "token"
// of the status page's buttons): 403 when none is configured, 401 when it is wrong. A request
// with an Authorization header is decided on it alone, before its body is read.
func (c *control) authorized(w http.ResponseWriter, r *http.Request) bool {
	if c.token == "" {
		http.Error(w, "control endpoints are off: set http_token_env in the config to the name of an environment variable holding a token", http.StatusForbidden)
		return false
	}
	ok := c.bearer(r)
	if r.Header.Get("Authorization") == "" {
		if err := r.ParseForm(); err != nil {
			formError(w, err)
			return false
		}
		ok = subtle.ConstantTimeCompare([]byte(r.PostForm.Get("token")), []byte(c.token)) == 1
	}
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="cronlock"`)
		http.Error(w, "wrong or missing bearer token", http.StatusUnauthorized)
	}
	return ok
}

func (c *control) act(w http.ResponseWriter, r *http.Request, action string) {
	if !c.authorized(w, r) {
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
		err = c.sched.Pause(r.Context(), name, reason)
	case "resume":
		err = c.sched.Resume(r.Context(), name)
	case "trigger":
		out["trigger"], err = c.sched.Trigger(r.Context(), name)
	}
	if c.failed(w, err, true, true) {
		return
	}
	// The page shows the change at once.
	c.jobs.reset()
	if r.Header.Get("Authorization") == "" { // a button of the status page: back to it
		http.Redirect(w, r, "/", http.StatusSeeOther)
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
