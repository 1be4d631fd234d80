package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/scheduler"
)

// jobStatus keeps, per job, the last tick this replica saw and its outcome, for /jobs. It is
// safe for concurrent use.
type jobStatus struct {
	mu      sync.Mutex
	last    map[string]*tickStatus
	running map[string]int
}

// tickStatus is what this replica knows of one tick of a job.
type tickStatus struct {
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

func newJobStatus() *jobStatus {
	return &jobStatus{last: map[string]*tickStatus{}, running: map[string]int{}}
}

type runRecordKey struct{}

// runRecord is filled by the command's handler, inside the lock, for the outermost middleware.
type runRecord struct {
	token   uint64
	started time.Time
}

// middleware is the outermost middleware of every job: it records each tick's final outcome.
func (s *jobStatus) middleware(replica string) middleware.Middleware {
	return func(next job.Handler) job.Handler {
		return func(ctx context.Context) error {
			run, _ := job.RunFrom(ctx)
			if run == nil {
				return next(ctx)
			}
			rec := &runRecord{}
			s.mu.Lock()
			s.running[run.Job]++
			s.mu.Unlock()
			err := next(context.WithValue(ctx, runRecordKey{}, rec))
			st := &tickStatus{Tick: run.Tick, Outcome: middleware.Outcome(err), Token: rec.token, Started: rec.started, Finished: time.Now()}
			if err != nil {
				st.Error = err.Error()
			}
			if !rec.started.IsZero() {
				st.Runner = replica
			} else if se, ok := errors.AsType[*job.SkipError](err); ok && se.Holder != nil &&
				(se.Reason == job.SkipDone || se.Reason == job.SkipHeld) {
				st.Runner = se.Holder.Label
			}
			s.mu.Lock()
			s.running[run.Job]--
			if old := s.last[run.Job]; old == nil || !run.Tick.Before(old.Tick) {
				s.last[run.Job] = st
			}
			s.mu.Unlock()
			return err
		}
	}
}

// started records, from inside the lock, that this replica runs the tick with token.
func started(ctx context.Context, token uint64) {
	if rec, ok := ctx.Value(runRecordKey{}).(*runRecord); ok {
		rec.token, rec.started = token, time.Now()
	}
}

// jobView is one job in /jobs.
type jobView struct {
	Name     string      `json:"name"`
	Schedule string      `json:"schedule"`
	Command  []string    `json:"command"`
	NextTick time.Time   `json:"next_tick,omitzero"`
	PrevTick time.Time   `json:"prev_tick,omitzero"`
	Running  int         `json:"running"`
	Last     *tickStatus `json:"last"`
}

func (s *jobStatus) view(cfg *config.Config, entries []scheduler.Entry) []jobView {
	commands := map[string][]string{}
	for _, j := range cfg.Jobs {
		commands[j.Name] = j.Command
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]jobView, 0, len(entries))
	for _, e := range entries {
		v := jobView{Name: e.Name, Schedule: e.Spec, Command: commands[e.Name], NextTick: e.Next.UTC(), PrevTick: e.Prev.UTC(), Running: s.running[e.Name]}
		if l := s.last[e.Name]; l != nil {
			c := *l
			v.Last = &c
		}
		out = append(out, v)
	}
	return out
}

// readiness answers /readyz: whether a quorum of nodes answers PING within readyTimeout. The
// answer is cached for readyCache.
type readiness struct {
	clients []*redis.Client
	quorum  int
	stop    atomic.Bool // the daemon is stopping: not ready

	mu     sync.Mutex
	at     time.Time
	ok     int
	detail []string
}

const (
	readyTimeout = time.Second
	readyCache   = time.Second
)

func (r *readiness) check(ctx context.Context) (ok int, detail []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.at.IsZero() && time.Since(r.at) < readyCache {
		return r.ok, r.detail
	}
	results := make([]error, len(r.clients))
	eachNode(ctx, r.clients, readyTimeout, func(ctx context.Context, i int, c *redis.Client) {
		results[i] = c.Ping(ctx).Err()
	})
	r.ok, r.detail = 0, nil
	for i, err := range results {
		if err == nil {
			r.ok++
			r.detail = append(r.detail, fmt.Sprintf("%s: ok", r.clients[i].Options().Addr))
		} else {
			r.detail = append(r.detail, fmt.Sprintf("%s: %v", r.clients[i].Options().Addr, err))
		}
	}
	r.at = time.Now()
	return r.ok, r.detail
}

// handler serves /healthz, /readyz, /jobs and /metrics (the Prometheus exposition of the
// daemon's OpenTelemetry metrics), and the control endpoints and status page (control.go).
func statusHandler(cfg *config.Config, replica string, sched *scheduler.Scheduler, st *jobStatus, ready *readiness, metrics http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready.stop.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: stopping")
			return
		}
		ok, detail := ready.check(r.Context())
		if ok < ready.quorum {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintf(w, "not ready: %d of %d nodes answer, quorum %d\n", ok, len(ready.clients), ready.quorum)
		} else {
			fmt.Fprintf(w, "ready: %d of %d nodes answer, quorum %d\n", ok, len(ready.clients), ready.quorum)
		}
		fmt.Fprintln(w, strings.Join(detail, "\n"))
	})
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(struct {
			Replica string    `json:"replica"`
			Jobs    []jobView `json:"jobs"`
		}{replica, st.view(cfg, sched.Entries())})
	})
	newControl(cfg, sched).mount(mux)
	return mux
}
