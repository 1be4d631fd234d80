package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
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
	Command  []string    `json:"command,omitempty"` // with the bearer token only
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

// readiness answers /readyz: whether a quorum of nodes answers and is out of quarantine
// (grants locks), from a probe of every node that is at most readyCache old. A Cluster node
// answers when its cluster_state is ok and the primaries of the jobs' hash slots answer, and is
// out of quarantine when every slot of the jobs' keys is (probeCluster).
type readiness struct {
	clients []redis.UniversalClient
	names   []string // the nodes' names in messages
	quorum  int
	bootKey string
	slots   func() []int // the hash slots of the jobs' keys, for Cluster nodes
	stop    atomic.Bool  // the daemon is stopping: not ready

	mu     sync.Mutex
	at     time.Time
	states []nodeState
}

const (
	readyTimeout = time.Second
	readyCache   = time.Second
)

// nodeState is what a probe found of a node.
type nodeState struct {
	addr    string
	err     error     // it did not answer
	missing bool      // it has no boot marker (a Cluster: a slot of the jobs has none): new, or lost its memory
	marker  string    // its boot marker (a Cluster: the one that ends last among the jobs' slots)
	until   time.Time // the end of its quarantine, on this host's clock (zero: none)

	// A Cluster's: how many of the jobs' slots it has, and how many of them have no boot
	// marker or are in quarantine.
	slots, missingSlots, quarantinedSlots int
}

// usable reports whether the node grants locks.
func (n nodeState) usable() bool { return n.err == nil && !n.missing && n.until.IsZero() }

// kind is the node's state without its details, to tell a change of state.
func (n nodeState) kind() string {
	switch {
	case n.err != nil:
		return "down"
	case n.missing:
		return "missing"
	case !n.until.IsZero():
		return "quarantined " + n.marker
	}
	return "ok"
}

// ofSlots says, for a Cluster, how many of the jobs' slots are affected: " (2 of the jobs' 5
// hash slots)"; "" for a standalone node.
func (n nodeState) ofSlots(count int) string {
	if n.slots == 0 {
		return ""
	}
	return fmt.Sprintf(" (%d of the jobs' %d hash slots)", count, n.slots)
}

func (n nodeState) String() string { return n.addr + ": " + n.state(true) }

// state says what the node's state is; with the error's text only when withErr is set.
func (n nodeState) state(withErr bool) string {
	switch {
	case n.err != nil && withErr:
		return fmt.Sprintf("down: %v", n.err)
	case n.err != nil:
		return "down"
	case n.missing:
		return fmt.Sprintf("no boot marker%s (new, or lost its memory): it refuses locks for max_ttl after the first lock attempt", n.ofSlots(n.missingSlots))
	case !n.until.IsZero():
		return fmt.Sprintf("in quarantine until %s%s: it refuses locks until then", n.until.UTC().Format(time.RFC3339), n.ofSlots(n.quarantinedSlots))
	}
	return "ok"
}

// check returns every node's state and how many are usable, probing the nodes if the last
// probe is older than readyCache.
func (r *readiness) check(ctx context.Context) (usable int, states []nodeState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.at.IsZero() || time.Since(r.at) >= readyCache {
		r.states = make([]nodeState, len(r.clients))
		var slots []int
		if slices.ContainsFunc(r.clients, isCluster) {
			slots = r.slots()
		}
		eachNode(ctx, r.clients, readyTimeout, func(ctx context.Context, i int, c redis.UniversalClient) {
			var n nodeState
			if cc, ok := c.(*redis.ClusterClient); ok {
				n = probeCluster(ctx, cc, r.bootKey, slots)
			} else {
				q, err := readQuarantine(ctx, c, r.bootKey)
				n.err, n.missing, n.marker = err, q.missing, q.value
				if err == nil && q.remaining > 0 {
					n.until = time.Now().Add(q.remaining)
				}
			}
			n.addr = r.names[i]
			r.states[i] = n
		})
		r.at = time.Now()
	}
	for _, n := range r.states {
		if n.usable() {
			usable++
		}
	}
	return usable, slices.Clone(r.states)
}

// statusHandler serves /healthz, /readyz, /jobs and /metrics (the Prometheus exposition of the
// daemon's OpenTelemetry metrics), and the control endpoints and status page (control.go), under
// guard. Without the bearer token, reads show the schedules and outcomes but no command line, no
// node address and no error text.
func statusHandler(cfg func() *config.Config, replica string, sched *scheduler.Scheduler, st *jobStatus, ready *readiness, metrics http.Handler) http.Handler {
	c := newControl(cfg(), sched) // token and trace links: a reload cannot change them
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", cachedResponse("/metrics", metrics))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if ready.stop.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: stopping")
			return
		}
		usable, states := ready.check(r.Context())
		verdict := "ready"
		if usable < ready.quorum {
			w.WriteHeader(http.StatusServiceUnavailable)
			verdict = "not ready"
		}
		fmt.Fprintf(w, "%s: %d of %d nodes answer and are out of quarantine, quorum %d\n", verdict, usable, len(ready.clients), ready.quorum)
		details := c.bearer(r)
		for i, n := range states {
			if details {
				fmt.Fprintln(w, n)
			} else {
				fmt.Fprintf(w, "nodes[%d]: %s\n", i, n.state(false))
			}
		}
	})
	mux.HandleFunc("GET /jobs", func(w http.ResponseWriter, r *http.Request) {
		jobs := st.view(cfg(), sched.Entries())
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
			Jobs    []jobView `json:"jobs"`
		}{replica, jobs})
	})
	c.mount(mux)
	return guard(mux)
}
