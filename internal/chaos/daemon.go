//go:build linux

package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/fencedstore"
)

// Daemon workers are `cronlock run` processes, each with a config naming its own proxies as
// its nodes and the same two jobs as the testworkers, under the same lock keys, so that they
// and the testworkers contend for the same ticks (and write to the same fenced store). Their
// jobs are shell commands (runScript) that record each run in the ledger in the testworkers'
// format: the command writes the start record, and the harness writes the end record once
// every process of the run is gone.
//
// A run's end is when its last process died, however it died. A command killed with SIGKILL
// (by its supervisor, at the lease's deadline or when its daemon died) cannot write its end,
// and its processes may outlive the command's shell, so neither the command nor the
// supervisor's report can say when the run ended. The kernel can: the command takes an
// exclusive flock on a file of its own first thing, on a descriptor that every process of the
// run inherits, and the kernel drops the lock when the last of them has exited. Whether the
// run worked to its end is the command's NAME.done file, unless the daemon logged that the
// command did not exit 0 (a signal can stop it after it wrote the file): then it was stopped,
// as its daemon counts it. The harness
// waits for that lock (a blocking flock, not a poll), so the end it records is the moment the
// run's processes were all gone, or a moment after — never before. An overlap the checker
// finds with these ends is therefore real.

// runScript is the command of the daemon workers' jobs (sh -c, in the runs directory). It
// records the run's start (taken before anything else), holds the run's flock, announces the
// run to the harness on the ledger, then works: runs of a job with CHAOS_LONG_EVERY > 0 work
// 2·TTL when their token is a multiple of it (so that a run outlives the lease it started
// under, and a supervisor that failed to kill it would show as an overlap); the others work
// between the testworkers' bounds, spread by the token (sh has no random numbers). With
// CHAOS_IGNORE_TERM=1 the run ignores SIGTERM, so only the supervisor's SIGKILL at the
// lease's deadline ends it in time. With CHAOS_FENCED_SHA, a run then writes its token to the
// fenced store (package fencedstore, with EVALSHA) as the testworkers' Forbid runs do; with
// CHAOS_FENCED_PG (a DSN) instead, it writes through the Postgres store with psql, as
// docs/locking.md shows a shell job fencing a Postgres write (the check's statement, then the
// log's, in one transaction; a refused check ends psql with "no rows returned for \gset",
// and the run logs the refusal in a transaction of its own). A run
// that worked to the end leaves NAME.done, with the store's answer and when it was asked
// (answer|unix ns; "|0" without a write); then, if it can take the file CHAOS_FREEZE
// (FreezeAfterSuccess), it stops its daemon (its supervisor's parent) with SIGSTOP and exits
// 0.
const runScript = `start=$(date +%s%N)
run="$CRONLOCK_JOB|$CRONLOCK_TICK_UNIX_MS|$CRONLOCK_REPLICA|$CRONLOCK_FENCING_TOKEN"
name="$CRONLOCK_JOB.$CRONLOCK_TICK_UNIX_MS.$CRONLOCK_REPLICA.$CRONLOCK_FENCING_TOKEN"
exec 9>"$name"
flock 9 || exit 1
redis-cli -h "$CHAOS_LEDGER_HOST" -p "$CHAOS_LEDGER_PORT" EVAL "redis.call('RPUSH', KEYS[1], ARGV[1]) return redis.call('RPUSH', KEYS[2], ARGV[2])" 2 "$CHAOS_LEDGER_KEY:started" "$CHAOS_LEDGER_KEY:daemon" "$run|$start" "$run|$start|$$" >/dev/null || exit 1
[ "$CHAOS_IGNORE_TERM" = 1 ] && trap '' TERM
t=$CRONLOCK_FENCING_TOKEN
if [ "$CHAOS_LONG_EVERY" -gt 0 ] && [ $((t % CHAOS_LONG_EVERY)) -eq 0 ]; then
  ms=$CHAOS_LONG_MS
else
  ms=$((CHAOS_WORK_MIN_MS + t % 1000003 * 7919 % (CHAOS_WORK_MAX_MS - CHAOS_WORK_MIN_MS)))
fi
sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
write="|0"
if [ -n "$CHAOS_FENCED_SHA" ]; then
  at=$(date +%s%N)
  ok=$(redis-cli -h "$CHAOS_LEDGER_HOST" -p "$CHAOS_LEDGER_PORT" EVALSHA "$CHAOS_FENCED_SHA" 3 $CHAOS_FENCED_KEYS "$t" "$t|$CRONLOCK_REPLICA|$CRONLOCK_TICK_UNIX_MS|$at") || exit 1
  case $ok in 1) write="accepted|$at" ;; 0) write="rejected|$at" ;; *) exit 1 ;; esac
elif [ -n "$CHAOS_FENCED_PG" ]; then
` + pgWrite + `fi
echo "$write" >"$name.done"
if mv "$CHAOS_FREEZE" "$CHAOS_FREEZE.taken" 2>/dev/null; then
  read -r _ _ _ daemon _ </proc/$PPID/stat && kill -STOP "$daemon"
fi
`

// pgWrite is runScript's write to the Postgres store: it writes token $t of the run through
// the fence check with psql and sets write to the store's answer (answer|unix ns), or exits 1.
const pgWrite = `  at=$(date +%s%N)
  set -- -X -q -v ON_ERROR_STOP=1 -v token="$t" -v job="$CRONLOCK_JOB" -v replica="$CRONLOCK_REPLICA" -v tick="$CRONLOCK_TICK_UNIX_MS" -v at="$at"
  if out=$(psql "$CHAOS_FENCED_PG" "$@" 2>&1 <<'SQL'
BEGIN;
INSERT INTO cronlock_fence AS f (resource, token) VALUES (:'job', :token)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
WHERE f.token <= EXCLUDED.token RETURNING f.token \gset
INSERT INTO writes (job, accepted, token, replica, tick_ms, at_ns) VALUES (:'job', true, :token, :'replica', :tick, :at);
COMMIT;
SQL
  ); then
    write="accepted|$at"
  else
    case $out in *"no rows returned for \gset"*) ;; *) echo "$out" >&2; exit 1 ;; esac
    psql "$CHAOS_FENCED_PG" "$@" <<'SQL' || exit 1
INSERT INTO writes (job, accepted, token, replica, tick_ms, at_ns) VALUES (:'job', false, :token, :'replica', :tick, :at);
SQL
    write="rejected|$at"
  fi
`

// longEvery is how often (by token) a run of the daemon workers' Forbid job works 2·TTL.
const longEvery = 4

// daemonConfig is a daemon worker's config file, written as JSON (which is YAML).
type daemonConfig struct {
	Nodes  []string    `json:"nodes"`
	MaxTTL string      `json:"max_ttl"`
	Jobs   []daemonJob `json:"jobs"`
}

type daemonJob struct {
	Name       string            `json:"name"`
	Schedule   string            `json:"schedule"`
	Command    []string          `json:"command"`
	LockTTL    string            `json:"lock_ttl"` // renewed every third of it, as the testworkers' locks
	Overlap    string            `json:"overlap"`
	Retries    int               `json:"retries"`
	WorkingDir string            `json:"working_dir"`
	Env        map[string]string `json:"env"`
}

func (h *harness) runsDir() string { return filepath.Join(h.cfg.Dir, "runs") }

// writeDaemonConfig writes worker w's config file and returns its path.
func (h *harness) writeDaemonConfig(w *worker) (string, error) {
	host, port, err := net.SplitHostPort(h.ledger.Addr())
	if err != nil {
		return "", err
	}
	sha, err := fencedstore.Script.Load(context.Background(), h.ledger.Client()).Result()
	if err != nil {
		return "", fmt.Errorf("loading the fenced store's script: %w", err)
	}
	cfg := daemonConfig{MaxTTL: h.s.maxTTL.String()}
	for _, p := range h.proxies[w.idx] {
		cfg.Nodes = append(cfg.Nodes, p.Addr())
	}
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	for _, j := range h.jobs {
		if j.Replace {
			continue // testworkers only: a daemon's replaced run looks like a stopped one in the ledger
		}
		schedule, workMin, workMax := "@every "+h.s.interval.String(), h.s.workMin, h.s.workMax
		if j.Burst {
			schedule, workMin, workMax = burstSpec, h.s.burstWorkMin, h.s.burstWorkMax
		}
		dj := daemonJob{
			Name: j.Name, Schedule: schedule, Command: []string{"sh", "-c", runScript},
			LockTTL: h.s.ttl.String(), Overlap: "allow", Retries: h.s.retries, WorkingDir: h.runsDir(),
			Env: map[string]string{
				"CHAOS_LEDGER_HOST": host, "CHAOS_LEDGER_PORT": port, "CHAOS_LEDGER_KEY": ledgerKey,
				"CHAOS_WORK_MIN_MS": ms(workMin), "CHAOS_WORK_MAX_MS": ms(workMax),
				"CHAOS_LONG_EVERY": "0", "CHAOS_LONG_MS": ms(2 * h.s.ttl), "CHAOS_IGNORE_TERM": "0",
				"CHAOS_FREEZE": w.freezeFile(),
			},
		}
		if j.Forbid {
			dj.Overlap = "forbid"
			if !j.Burst { // the burst set's runs are short
				dj.Env["CHAOS_LONG_EVERY"], dj.Env["CHAOS_IGNORE_TERM"] = strconv.Itoa(longEvery), "1"
			}
			if h.pg != nil {
				dj.Env["CHAOS_FENCED_PG"] = h.pg.DSN
			} else {
				// The keys hold no spaces: the script splits them.
				dj.Env["CHAOS_FENCED_SHA"], dj.Env["CHAOS_FENCED_KEYS"] = sha, strings.Join(fencedstore.Keys(fencedKey, j.Name), " ")
			}
		}
		cfg.Jobs = append(cfg.Jobs, dj)
	}
	data, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(h.cfg.Dir, w.name+".yaml")
	return path, os.WriteFile(path, data, 0o644)
}

// runWatch records the end of every daemon worker's run: it takes each run the commands
// announce on the ledger and waits for the run's flock (see the top of this file).
type runWatch struct {
	rc  *redis.Client // its own: a BLPOP holds a connection
	dir string        // the runs directory

	loop    sync.WaitGroup
	runs    sync.WaitGroup
	mu      sync.Mutex
	pending map[string]int // runs not ended yet: their ledger head → process group
	errs    []string
	stopped bool
}

// stopEntry, pushed to the announcements, ends the watch's loop.
const stopEntry = "stop"

// startRunWatch starts watching the runs announced on the ledger node at addr.
func startRunWatch(addr, dir string) *runWatch {
	rc := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	rw := &runWatch{rc: rc, dir: dir, pending: map[string]int{}}
	rw.loop.Go(rw.follow)
	return rw
}

func (rw *runWatch) problem(format string, args ...any) {
	rw.mu.Lock()
	rw.errs = append(rw.errs, fmt.Sprintf(format, args...))
	rw.mu.Unlock()
}

// follow takes the runs' announcements (job|tick|replica|token|start|pgid) until stopEntry.
func (rw *runWatch) follow() {
	for {
		v, err := rw.rc.BLPop(context.Background(), 0, ledgerKey+":daemon").Result()
		if err != nil {
			rw.problem("reading the daemon runs' announcements: %v", err)
			return
		}
		if v[1] == stopEntry {
			return
		}
		i := strings.LastIndexByte(v[1], '|')
		pgid, err := strconv.Atoi(v[1][i+1:])
		f := strings.Split(v[1][:i], "|")
		if err != nil || len(f) != 5 {
			rw.problem("daemon run announcement %q: want job|tick|replica|token|start|pgid", v[1])
			continue
		}
		head := strings.Join(f[:4], "|")
		rw.mu.Lock()
		rw.pending[head] = pgid
		rw.mu.Unlock()
		rw.runs.Go(func() { rw.watch(head, f[4], strings.Join(f[:4], ".")) })
	}
}

// watch waits until every process of the run head is gone and writes its end to the ledger:
// head|start|end|cancelled|deadline|cause|write|writeAt|liveAfter, with no deadline (its
// processes are the run: no context outlives them), cancelled when it did not work to its
// end (no NAME.done), and the fenced store's answer from NAME.done (live after the write: the
// run went on to write NAME.done).
func (rw *runWatch) watch(head, start, name string) {
	defer func() {
		rw.mu.Lock()
		delete(rw.pending, head)
		rw.mu.Unlock()
	}()
	f, err := os.Open(filepath.Join(rw.dir, name))
	if err != nil {
		rw.problem("run %s: %v", head, err)
		return
	}
	defer f.Close()
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	end := time.Now()
	if err != nil {
		rw.problem("run %s: waiting for its flock: %v", head, err)
		return
	}
	cancelled, cause, write, liveAfter := 0, "", "|0", 0
	if done, err := os.ReadFile(filepath.Join(rw.dir, name+".done")); err != nil {
		cancelled, cause = 1, StoppedCause
	} else if write = strings.TrimSpace(string(done)); write != "|0" {
		liveAfter = 1
	}
	rec := fmt.Sprintf("%s|%s|%d|%d|0|%s|%s|%d", head, start, end.UnixNano(), cancelled, cause, write, liveAfter)
	if err := rw.rc.RPush(context.Background(), ledgerKey, rec).Err(); err != nil {
		rw.problem("run %s: writing its end: %v", head, err)
	}
}

// stop ends the watch: it takes the announcements left, gives the runs not ended yet up to
// wait to end, then reports each one still running and kills its process group (a run
// outlived its daemon; a process that left the group is not reached, and its watch is given
// up after another wait), and returns the problems it met. Only its first call does anything.
func (rw *runWatch) stop(wait time.Duration) []string {
	rw.mu.Lock()
	stopped := rw.stopped
	rw.stopped = true
	rw.mu.Unlock()
	if stopped {
		return nil
	}
	defer rw.rc.Close()
	if err := rw.rc.RPush(context.Background(), ledgerKey+":daemon", stopEntry).Err(); err != nil {
		rw.problem("stopping the daemon runs' watch: %v", err)
		_ = rw.rc.Close() // ends the loop's BLPOP
	}
	rw.loop.Wait()
	ended := make(chan struct{})
	go func() { rw.runs.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-time.After(wait):
		rw.mu.Lock()
		for head, pgid := range rw.pending {
			rw.errs = append(rw.errs, fmt.Sprintf("run %s: processes of its group %d still running after every worker stopped: killed", head, pgid))
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		rw.mu.Unlock()
		select {
		case <-ended:
		case <-time.After(wait):
			rw.problem("runs still holding their flock after their process groups were killed")
		}
	}
	rw.mu.Lock()
	defer rw.mu.Unlock()
	return rw.errs
}

// stoppingMsg starts the daemon's log line that says it stops: it takes no tick from then
// on, and no run's command starts after it.
const stoppingMsg = "stopping"

// exitedZero is the status the daemon's "run finished" line gives a command that exited 0.
const exitedZero = "exited with status 0"

// daemonLog is what the harness reads from a daemon worker's log.
type daemonLog struct {
	outcomes []Outcome
	stops    []Stop
	// failed are the runs whose command did not exit 0 ("run finished" with another status):
	// a command can be stopped by a signal after it wrote its NAME.done, and its daemon then
	// counts the attempt failed.
	failed map[runID]bool
}

// readLog reads from daemon worker w's log each tick's outcome on it (at debug level the
// daemon logs every one, as the testworkers record theirs in the ledger), with Fired and Done
// both the time of the log line, each of its stops (the time of its "stopping" line), and the
// runs whose command did not exit 0.
func (w *worker) readLog() (daemonLog, error) {
	l := daemonLog{failed: map[runID]bool{}}
	data, err := os.ReadFile(w.logFile())
	if err != nil {
		return l, err
	}
	for line := range strings.Lines(string(data)) {
		var rec struct {
			Time    time.Time `json:"time"`
			Msg     string    `json:"msg"`
			Job     string    `json:"job"`
			Tick    time.Time `json:"tick"`
			Outcome string    `json:"outcome"`
			Token   uint64    `json:"token"`
			Status  string    `json:"status"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			return l, fmt.Errorf("%s: not a JSON line: %q", w.logFile(), line)
		}
		switch {
		case rec.Msg == "cronlock: tick":
			l.outcomes = append(l.outcomes, Outcome{Job: rec.Job, Replica: w.name, Tick: rec.Tick, Outcome: rec.Outcome, Fired: rec.Time, Done: rec.Time})
		case strings.HasPrefix(rec.Msg, stoppingMsg+":"):
			l.stops = append(l.stops, Stop{Replica: w.name, At: rec.Time})
		case rec.Msg == "run finished" && rec.Status != exitedZero:
			l.failed[runID{rec.Job, w.name, rec.Tick.UnixMilli(), rec.Token}] = true
		}
	}
	return l, nil
}
