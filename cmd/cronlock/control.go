package main

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/history"
	"github.com/cronlock/cronlock/scheduler"
)

const controlUsage = `Usage: cronlock pause|resume|trigger|history JOB --config FILE [flags]

  pause    pause JOB on every replica (its ticks are skipped as skipped_paused) until resume
  resume   end JOB's pause
  trigger  ask for one manual run of JOB, run once by some running replica; prints its id
  history  print JOB's last runs, newest first

The state lives on the lock nodes: no daemon needs to be reached. Flags:
`

// controlCmd runs pause, resume, trigger or history.
func controlCmd(ctx context.Context, cmd string, args []string, stdout, stderr io.Writer) error {
	fs, cf := flagSet(cmd)
	reason := fs.String("reason", "paused with cronlock pause", "pause: why (shown with every skipped tick)")
	n := fs.Int("n", 20, "history: how many runs")
	timeout := fs.Duration("timeout", 10*time.Second, "how long the command may take")
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, controlUsage, args, stdout); err != nil {
		return err
	}
	if name == "" {
		return usageError{fmt.Errorf("%s: give the job's name: cronlock %s JOB --config FILE", cmd, cmd)}
	}
	cfg, err := cf.load(cmd)
	if err != nil {
		return err
	}
	if !hasJob(cfg, name) {
		return usageError{fmt.Errorf("%s: job %q is not in %s", cmd, name, cfg.File)}
	}
	ctl, done, err := controlClient(cfg)
	if err != nil {
		return err
	}
	defer done()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	switch cmd {
	case "pause":
		if err := ctl.Pause(ctx, name, *reason); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "paused %s: %s\n", name, *reason)
	case "resume":
		if err := ctl.Resume(ctx, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "resumed %s\n", name)
	case "trigger":
		id, err := ctl.Trigger(ctx, name)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, id)
	case "history":
		h, err := ctl.History(ctx, name, *n)
		if err != nil && h == nil {
			return err
		}
		history.Print(stdout, h)
		if err != nil {
			fmt.Fprintf(stderr, "warning: %v\n", err)
		}
	}
	return nil
}

// controlClient returns a control client over cfg's nodes, with cfg's prefix. done closes it.
func controlClient(cfg *config.Config) (*scheduler.Control, func(), error) {
	clients, err := nodeClients(cfg)
	if err != nil {
		return nil, nil, err
	}
	replica := defaultReplica()
	locks, err := lockClient(cfg, clients, replica)
	if err != nil {
		closeClients(clients)
		return nil, nil, usageError{fmt.Errorf("%s: nodes: %w", cfg.File, err)}
	}
	done := func() { _ = locks.Close(); closeClients(clients) }
	ctl, err := scheduler.NewControl(locks, scheduler.WithPrefix(cfg.Prefix), scheduler.WithReplica(replica))
	if err != nil {
		done()
		return nil, nil, usageError{fmt.Errorf("%s: %w", cfg.File, err)}
	}
	return ctl, done, nil
}

// hasJob reports whether cfg has a job named name.
func hasJob(cfg *config.Config, name string) bool {
	return slices.ContainsFunc(cfg.Jobs, func(j config.Job) bool { return j.Name == name })
}

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
	c.jobs = &snapshot[[]pageJob]{ttl: pageCache, read: c.readJobs}
	return c
}

// mount adds GET /, GET /jobs/{name}/history and POST /jobs/{name}/{pause,resume,trigger}.
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
