package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/fencedstore"
	"github.com/cronlock/cronlock/scheduler"
)

// JobRun is one run of a job as the workers' ledger tells it (see internal/testworker, and
// daemon.go for the daemon workers' runs: their End is when their last process was gone).
type JobRun struct {
	Job, Replica string
	Tick         time.Time
	Token        uint64
	Start        time.Time
	// Finished is false for a run that started and never wrote its end: its worker was
	// killed. The fields below are zero then.
	Finished  bool
	End       time.Time
	Cancelled bool      // the run's context had ended when the job returned
	Deadline  time.Time // the context's deadline then (the lease's validity); zero for a daemon worker's run
	Cause     string    // the context's cause; a daemon worker's run that did not work to its end has StoppedCause
	Write     string    // the fenced store's answer: "accepted", "rejected", or "" (no write)
	WriteAt   time.Time
	LiveAfter bool // the context was still live after the write returned
}

// Outcome is one tick's outcome on one replica (middleware.Outcome).
type Outcome struct {
	Job, Replica string
	Tick         time.Time
	Outcome      string
	Fired, Done  time.Time
}

// Write is one write the fenced store accepted or refused, in the order it decided them.
type Write struct {
	Token   uint64
	Replica string
	Tick    time.Time
	At      time.Time
}

// Stop is when a worker began to stop (a testworker called Scheduler.Stop; a daemon worker
// logged "stopping"): no run of that worker process may start after it.
type Stop struct {
	Replica string
	At      time.Time
}

// Data is everything the workers and the fenced store wrote during a run.
type Data struct {
	Runs     []JobRun
	Outcomes []Outcome
	// Accepted and Rejected are the fenced store's logs per job.
	Accepted, Rejected map[string][]Write
	// History is the jobs' run history on the lock nodes (scheduler.Control.History), read
	// once the workers stopped.
	History []scheduler.Record
	// Stops are the workers' stops: the testworkers' from the ledger, the daemon workers'
	// from their logs.
	Stops []Stop
	// InFlight is, per job, what each lock node's record of the job's runs in flight held
	// once the workers stopped (its fields and values, one string per node; nil: not read).
	// A run recorded in flight holds its token there until its history record is written.
	InFlight map[string][]string
}

// fields splits a ledger line and parses its numbers on demand, remembering the first error.
type fields struct {
	f   []string
	err error
}

func (p *fields) num(i int) int64 {
	n, err := strconv.ParseInt(p.f[i], 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("field %d: %w", i, err)
	}
	return n
}

func (p *fields) unsigned(i int) uint64 {
	n, err := strconv.ParseUint(p.f[i], 10, 64)
	if err != nil && p.err == nil {
		p.err = fmt.Errorf("field %d: %w", i, err)
	}
	return n
}

func (p *fields) ns(i int) time.Time { return time.Unix(0, p.num(i)) }
func (p *fields) ms(i int) time.Time { return time.UnixMilli(p.num(i)) }

// nsOrZero is ns, with 0 for the zero time (none).
func (p *fields) nsOrZero(i int) time.Time {
	if n := p.num(i); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

func split(line string, n int) (*fields, error) {
	f := strings.Split(line, "|")
	if len(f) != n {
		return nil, fmt.Errorf("ledger line %q: %d fields, want %d", line, len(f), n)
	}
	return &fields{f: f}, nil
}

// runID identifies a run across the started and the finished ledgers.
type runID struct {
	job, replica string
	tick         int64
	token        uint64
}

func parseRuns(started, finished []string) ([]JobRun, error) {
	byID := map[runID]int{}
	var runs []JobRun
	for _, line := range started {
		p, err := split(line, 5)
		if err != nil {
			return nil, err
		}
		r := JobRun{Job: p.f[0], Tick: p.ms(1), Replica: p.f[2], Token: p.unsigned(3), Start: p.ns(4)}
		if p.err != nil {
			return nil, fmt.Errorf("ledger line %q: %w", line, p.err)
		}
		byID[runID{r.Job, r.Replica, r.Tick.UnixMilli(), r.Token}] = len(runs)
		runs = append(runs, r)
	}
	for _, line := range finished {
		p, err := split(line, 12)
		if err != nil {
			return nil, err
		}
		id := runID{p.f[0], p.f[2], p.num(1), p.unsigned(3)}
		i, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("ledger line %q: a run that never started", line)
		}
		r := &runs[i]
		r.Finished, r.End, r.Cancelled, r.Cause = true, p.ns(5), p.f[6] == "1", p.f[8]
		r.Deadline, r.Write, r.WriteAt, r.LiveAfter = p.nsOrZero(7), p.f[9], p.nsOrZero(10), p.f[11] == "1"
		if p.err != nil {
			return nil, fmt.Errorf("ledger line %q: %w", line, p.err)
		}
	}
	return runs, nil
}

func parseOutcomes(lines []string) ([]Outcome, error) {
	out := make([]Outcome, 0, len(lines))
	for _, line := range lines {
		p, err := split(line, 6)
		if err != nil {
			return nil, err
		}
		o := Outcome{Job: p.f[0], Tick: p.ms(1), Replica: p.f[2], Outcome: p.f[3], Fired: p.ns(4), Done: p.ns(5)}
		if p.err != nil {
			return nil, fmt.Errorf("outcome line %q: %w", line, p.err)
		}
		out = append(out, o)
	}
	return out, nil
}

func parseStops(lines []string) ([]Stop, error) {
	out := make([]Stop, 0, len(lines))
	for _, line := range lines {
		p, err := split(line, 2)
		if err != nil {
			return nil, err
		}
		st := Stop{Replica: p.f[0], At: p.ns(1)}
		if p.err != nil {
			return nil, fmt.Errorf("stop line %q: %w", line, p.err)
		}
		out = append(out, st)
	}
	return out, nil
}

func parseWrites(lines []string) ([]Write, error) {
	out := make([]Write, 0, len(lines))
	for _, line := range lines {
		p, err := split(line, 4)
		if err != nil {
			return nil, err
		}
		w := Write{Token: p.unsigned(0), Replica: p.f[1], Tick: p.ms(2), At: p.ns(3)}
		if p.err != nil {
			return nil, fmt.Errorf("fenced store line %q: %w", line, p.err)
		}
		out = append(out, w)
	}
	return out, nil
}

// readData reads the ledger lists under key and the fenced store under fenced for jobs.
func readData(ctx context.Context, rc *redis.Client, key, fenced string, jobs []string) (Data, error) {
	list := func(k string) ([]string, error) { return rc.LRange(ctx, k, 0, -1).Result() }
	started, err := list(key + ":started")
	if err != nil {
		return Data{}, err
	}
	finished, err := list(key)
	if err != nil {
		return Data{}, err
	}
	outcomes, err := list(key + ":outcomes")
	if err != nil {
		return Data{}, err
	}
	stops, err := list(key + ":stops")
	if err != nil {
		return Data{}, err
	}
	d := Data{Accepted: map[string][]Write{}, Rejected: map[string][]Write{}}
	if d.Runs, err = parseRuns(started, finished); err != nil {
		return Data{}, err
	}
	if d.Outcomes, err = parseOutcomes(outcomes); err != nil {
		return Data{}, err
	}
	if d.Stops, err = parseStops(stops); err != nil {
		return Data{}, err
	}
	for _, j := range jobs {
		keys := fencedstore.Keys(fenced, j)
		for key, into := range map[string]map[string][]Write{keys[1]: d.Accepted, keys[2]: d.Rejected} {
			lines, err := list(key)
			if err != nil {
				return Data{}, err
			}
			if into[j], err = parseWrites(lines); err != nil {
				return Data{}, err
			}
		}
	}
	return d, nil
}

// readPostgresWrites reads the Postgres fenced store's log of jobs' writes (see
// fencedstore.WritePostgres), accepted and refused, each in the order the store decided them.
func readPostgresWrites(ctx context.Context, dsn string, jobs []string) (accepted, rejected map[string][]Write, err error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	defer conn.Close(ctx)
	accepted, rejected = map[string][]Write{}, map[string][]Write{}
	for _, j := range jobs {
		writes, err := fencedstore.PostgresWrites(ctx, conn, j)
		if err != nil {
			return nil, nil, err
		}
		for _, w := range writes {
			into := rejected
			if w.Accepted {
				into = accepted
			}
			into[j] = append(into[j], Write{Token: w.Token, Replica: w.Replica, Tick: w.Tick, At: w.At})
		}
	}
	return accepted, rejected, nil
}

// writeJSON writes v to path as JSON.
func writeJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
