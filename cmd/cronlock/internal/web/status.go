package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// JobStatus keeps, per job, the last tick this replica saw and its outcome, for /jobs. It is
// safe for concurrent use.
type JobStatus struct {
	mu      sync.Mutex
	last    map[string]*TickStatus
	running map[string]map[*runRecord]bool // the ticks this replica works on now
}

// TickStatus is what this replica knows of one tick of a job.
type TickStatus struct {
	Tick time.Time `json:"tick"`
	// Outcome is this replica's outcome (middleware.Outcome).
	Outcome string `json:"outcome"`
	// Runner is the replica that ran the tick, or is running it, when known.
	Runner string `json:"runner,omitempty"`
	// Token is the fencing token of the run, when this replica ran it.
	Token    uint64    `json:"token,omitempty"`
	Started  time.Time `json:"started,omitzero"`
	Finished time.Time `json:"finished"`
	Error    string    `json:"error,omitempty"`
}

// NewJobStatus returns an empty JobStatus.
func NewJobStatus() *JobStatus {
	return &JobStatus{last: map[string]*TickStatus{}, running: map[string]map[*runRecord]bool{}}
}

type runRecordKey struct{}

// runRecord is filled by the command's handler, inside the lock, for the outermost middleware;
// under its JobStatus's mu.
type runRecord struct {
	status  *JobStatus
	token   uint64
	started time.Time
}

// Middleware is the outermost middleware of every job: it records each tick's final outcome.
func (s *JobStatus) Middleware(replica string) middleware.Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			run, _ := job.RunFrom(ctx)
			if run == nil {
				return next(ctx)
			}
			rec := &runRecord{status: s}
			s.mu.Lock()
			if s.running[run.Job] == nil {
				s.running[run.Job] = map[*runRecord]bool{}
			}
			s.running[run.Job][rec] = true
			s.mu.Unlock()
			err := next(context.WithValue(ctx, runRecordKey{}, rec))
			s.mu.Lock()
			delete(s.running[run.Job], rec)
			if len(s.running[run.Job]) == 0 {
				delete(s.running, run.Job)
			}
			s.mu.Unlock()
			st := &TickStatus{Tick: run.Tick, Outcome: middleware.Outcome(err), Token: rec.token, Started: rec.started, Finished: time.Now()}
			if err != nil {
				st.Error = err.Error()
			}
			if !rec.started.IsZero() {
				st.Runner = replica
			} else if se, ok := errors.AsType[*job.SkipError](err); ok && se.Holder != "" &&
				(se.Reason == job.SkipDone || se.Reason == job.SkipHeld) {
				st.Runner = se.Holder
			}
			s.mu.Lock()
			if old := s.last[run.Job]; old == nil || !run.Tick.Before(old.Tick) {
				s.last[run.Job] = st
			}
			s.mu.Unlock()
			return err
		}
	}
}

// Started records, from inside the lock, that this replica runs the tick with token.
func Started(ctx context.Context, token uint64) {
	if rec, ok := ctx.Value(runRecordKey{}).(*runRecord); ok {
		rec.status.mu.Lock()
		rec.token, rec.started = token, time.Now()
		rec.status.mu.Unlock()
	}
}

// JobView is one job in /jobs.
type JobView struct {
	Name     string    `json:"name"`
	Schedule string    `json:"schedule"`
	Resolved string    `json:"resolved_schedule,omitempty"` // the schedule with H resolved, when it has H
	Jitter   string    `json:"jitter,omitempty"`            // the job's jitter, when it has one
	Command  []string  `json:"command,omitempty"`           // with the bearer token only
	NextTick time.Time `json:"next_tick,omitzero"`
	PrevTick time.Time `json:"prev_tick,omitzero"`
	// Running counts the job's runs in flight on any replica (scheduler.Status.Running), or
	// this replica's when the nodes could not be read.
	Running int         `json:"running"`
	Last    *TickStatus `json:"last"`
	Paused  *PauseView  `json:"paused,omitempty"` // from the lock nodes: the cluster's pause, if any
}

// PauseView is a job's pause in /jobs: why, since when and who paused it (a name given with
// cronlock pause --by or signed in to the console, else the replica that was asked).
type PauseView struct {
	Reason string    `json:"reason"`
	Since  time.Time `json:"since,omitzero"`
	By     string    `json:"by,omitempty"`
}

func (s *JobStatus) view(cfg *config.Config, entries []scheduler.Entry) []JobView {
	commands := map[string][]string{}
	for _, j := range cfg.Jobs {
		commands[j.Name] = j.Command
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]JobView, 0, len(entries))
	for _, e := range entries {
		v := JobView{Name: e.Name, Schedule: e.Spec, Command: commands[e.Name], NextTick: e.Next.UTC(), PrevTick: e.Prev.UTC(), Running: len(s.running[e.Name])}
		if e.Schedule != e.Spec {
			v.Resolved = e.Schedule
		}
		if e.Jitter > 0 {
			v.Jitter = e.Jitter.String()
		}
		if l := s.last[e.Name]; l != nil {
			c := *l
			v.Last = &c
		}
		out = append(out, v)
	}
	return out
}

// Readiness answers /readyz and the console's line of nodes: the lock nodes' state, with their
// addresses and errors only when details is set (the request carries the bearer token).
type Readiness func(ctx context.Context, details bool) nodes.Status

// Handler serves /healthz, /readyz, /jobs and /metrics (the Prometheus exposition of the
// daemon's OpenTelemetry metrics), and the control endpoints and status page (control.go), under
// guard. Without the bearer token, reads show the schedules and outcomes but no command line, no
// node address and no error text. replica is the name sched was given (scheduler.WithReplica).
func Handler(cfg func() *config.Config, replica string, sched *scheduler.Scheduler, st *JobStatus, ready Readiness, metrics http.Handler) http.Handler {
	c := newControl(cfg, replica, sched, st, ready)
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", cachedResponse("/metrics", metrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		nodes := ready(r.Context(), c.bearer(r))
		if !nodes.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_, _ = io.WriteString(w, nodes.Report)
	})
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, r *http.Request) {
		jobs := st.view(cfg(), sched.Entries())
		read := c.jobs.get(r.Context()) // the console's cache of the nodes
		for i := range jobs {
			k, ok := read.byName[jobs[i].Name]
			if !ok {
				continue
			}
			if read.jobs[k].Err == "" {
				jobs[i].Running = len(read.jobs[k].Running) // the cluster's, as the console's "Running now"
			}
			if p := read.jobs[k].Paused; p != nil {
				jobs[i].Paused = &PauseView{Reason: p.Reason, Since: p.Since.UTC(), By: p.By}
			}
		}
		if !c.bearer(r) {
			for i := range jobs {
				jobs[i].Command = nil
				if jobs[i].Last != nil {
					jobs[i].Last.Error = ""
				}
			}
		}
		writeJSON(w, http.StatusOK, struct {
			Replica string    `json:"replica"`
			Jobs    []JobView `json:"jobs"`
		}{replica, jobs})
	})
	c.mount(mux)
	return guard(mux)
}
