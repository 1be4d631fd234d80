package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/bench/internal/nodecost"
	"github.com/cronlock/cronlock/internal/redistest"
)

const (
	// readyTimeout bounds how long the replicas may take to add their jobs and start.
	readyTimeout = 5 * time.Minute
	// exitTimeout bounds how long a replica may take to exit once told to stop: its Stop's
	// bound and some.
	exitTimeout = stopTimeout + 15*time.Second
	// stderrTail is how much of a failed replica's stderr an error quotes.
	stderrTail = 2048
)

// measure makes one run of cfg: fresh nodes, cfg.replicas replica processes (self with the
// worker flag), the window measured, everything stopped and removed on return.
func measure(ctx context.Context, self string, cfg config) (result, error) {
	var res result
	if err := cfg.validate(); err != nil {
		return res, err
	}
	dir, err := os.MkdirTemp("", "burst-*")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	n, err := startNodes(cfg)
	if err != nil {
		return res, err
	}
	defer n.close()
	if err := endQuarantine(ctx, n.addrs()); err != nil {
		return res, err
	}
	res.LoadBefore = loadAverage()
	reps, err := startReplicas(ctx, self, cfg, n.addrs(), dir)
	if err != nil {
		return res, err
	}
	defer reps.kill()
	w := cfg.window(time.Now())

	if err := reps.sleepUntil(ctx, w.from); err != nil {
		return res, err
	}
	before, err := nodecost.Read(ctx, n.rcs)
	if err != nil {
		return res, err
	}
	if n.cg != nil {
		if err := n.cg.Zero(); err != nil {
			return res, err
		}
	}
	reps.signal(sigFrom)
	if err := reps.sleepUntil(ctx, w.to); err != nil {
		return res, err
	}
	reps.signal(sigTo)
	var instr int64
	if n.cg != nil { // before INFO, whose instructions are not the runs'
		if instr, err = n.cg.Dump(); err != nil {
			return res, err
		}
	}
	after, err := nodecost.Read(ctx, n.rcs)
	if err != nil {
		return res, err
	}
	if err := reps.sleepUntil(ctx, w.end); err != nil {
		return res, err
	}
	outs, err := reps.stop()
	if err != nil {
		return res, err
	}
	res.LoadAfter = loadAverage()
	if err := res.summarize(cfg, w, outs, after.Since(before), instr); err != nil {
		return res, err
	}
	err = res.readLogs(cfg, w, reps)
	return res, err
}

// readLogs counts the lines the replicas logged, keeps the last, and copies the logs to
// cfg.logs if set.
func (res *result) readLogs(cfg config, w window, reps *replicas) error {
	for _, r := range reps.list {
		n, last := r.logLines()
		res.LogLines += n
		if n > 0 {
			res.LastLog = last
		}
		if cfg.logs != "" {
			name := fmt.Sprintf("%s-%d-%s-replica-%d.log", cfg.workload, cfg.jobs, w.from.UTC().Format("20060102T150405Z"), r.i)
			if err := copyFile(r.stderr, filepath.Join(cfg.logs, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// nodes are a run's redis-servers, the clients that read their counters, and callgrind's
// handle with -callgrind.
type nodes struct {
	servers []*redistest.Server
	rcs     []*redis.Client
	cg      *nodecost.Callgrind
}

func startNodes(cfg config) (*nodes, error) {
	n := &nodes{}
	var rcfg redistest.Config
	if cfg.callgrind {
		cg, err := nodecost.NewCallgrind("")
		if err != nil {
			return nil, err
		}
		n.cg = cg
		rcfg.Wrap = cg.Wrap()
	}
	servers, err := redistest.NewN(cfg.nodes, rcfg)
	if err != nil {
		n.close()
		return nil, err
	}
	n.servers = servers
	for _, s := range servers {
		n.rcs = append(n.rcs, redis.NewClient(&redis.Options{Addr: s.Addr()}))
		if n.cg != nil {
			n.cg.Watch(s.PID())
		}
	}
	return n, nil
}

func (n *nodes) addrs() []string {
	var a []string
	for _, s := range n.servers {
		a = append(a, s.Addr())
	}
	return a
}

func (n *nodes) close() {
	for _, rc := range n.rcs {
		_ = rc.Close()
	}
	for _, s := range n.servers {
		_ = s.Close()
	}
	if n.cg != nil {
		n.cg.Close()
	}
}

// endQuarantine ends the quarantine of the new, empty nodes, with a lock client of its own.
func endQuarantine(ctx context.Context, addrs []string) error {
	locks, closeLocks, err := newLocks(addrs)
	if err != nil {
		return err
	}
	defer closeLocks()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return locks.EndQuarantine(ctx)
}

// replica is one replica process.
type replica struct {
	i      int
	cmd    *exec.Cmd
	stderr string // the file of its stderr
	out    string // its result file
	ready  chan struct{}
	done   chan struct{} // closed once it has exited and been reaped
	err    error         // cmd.Wait's, set before done is closed
}

// replicas are a run's replica processes. Each is owned by a goroutine that started it and
// waits for it; kill kills those still running and waits for every one.
type replicas struct {
	list   []*replica
	exited chan *replica // each replica once, as it exits
}

// startReplicas starts the replicas and returns once every one printed that it is ready.
func startReplicas(ctx context.Context, self string, cfg config, addrs []string, dir string) (*replicas, error) {
	w := cfg.window(time.Now())
	// Every job runs at most once per period; the ledger's room is the runs until the end of
	// the window, from a start that may take a period or two.
	runsPerJob := int(time.Until(w.end)/(time.Duration(cfg.period)*time.Second)) + 3
	reps := &replicas{exited: make(chan *replica, cfg.replicas)}
	for i := range cfg.replicas {
		r := &replica{
			i:      i,
			stderr: filepath.Join(dir, fmt.Sprintf("replica-%d.stderr", i)),
			out:    filepath.Join(dir, fmt.Sprintf("replica-%d.json", i)),
			ready:  make(chan struct{}),
			done:   make(chan struct{}),
		}
		r.cmd = exec.Command(self, workerFlag,
			"-nodes", strings.Join(addrs, ","), "-workload", cfg.workload, "-jobs", strconv.Itoa(cfg.jobs),
			"-period", strconv.Itoa(cfg.period), "-capacity", strconv.Itoa(cfg.jobs*runsPerJob), "-out", r.out)
		if err := reps.start(r); err != nil {
			reps.kill()
			return nil, err
		}
	}
	timeout := time.NewTimer(readyTimeout)
	defer timeout.Stop()
	for _, r := range reps.list {
		select {
		case <-r.ready:
		case <-r.done:
			reps.kill()
			return nil, r.failure("exited before it was ready")
		case <-timeout.C:
			reps.kill()
			return nil, fmt.Errorf("replica %d: not ready after %v", r.i, readyTimeout)
		case <-ctx.Done():
			reps.kill()
			return nil, ctx.Err()
		}
	}
	return reps, nil
}

// start starts r in a goroutine of its own that then waits for it.
func (reps *replicas) start(r *replica) error {
	stderr, err := os.Create(r.stderr)
	if err != nil {
		return err
	}
	defer stderr.Close() // the replica has its own descriptor
	r.cmd.Stdout, r.cmd.Stderr = &readyWriter{ready: r.ready}, stderr
	r.cmd.SysProcAttr = sysProcAttr()
	started := make(chan error)
	go func() {
		lockThreadForChild()
		err := r.cmd.Start()
		started <- err
		if err != nil {
			return
		}
		r.err = r.cmd.Wait()
		close(r.done)
		reps.exited <- r
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("replica %d: %w", r.i, err)
	}
	reps.list = append(reps.list, r)
	return nil
}

// sleepUntil waits until t, failing if a replica exits or ctx ends first.
func (reps *replicas) sleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case r := <-reps.exited:
		return r.failure("exited before it was told to stop")
	case <-ctx.Done():
		return ctx.Err()
	}
}

// signal sends sig to every replica.
func (reps *replicas) signal(sig os.Signal) {
	for _, r := range reps.list {
		_ = r.cmd.Process.Signal(sig)
	}
}

// stop tells every replica to stop, waits for them and returns their results.
func (reps *replicas) stop() ([]replicaResult, error) {
	reps.signal(sigStop)
	timeout := time.NewTimer(exitTimeout)
	defer timeout.Stop()
	var outs []replicaResult
	for _, r := range reps.list {
		select {
		case <-r.done:
		case <-timeout.C:
			return nil, fmt.Errorf("replica %d: still running %v after it was told to stop", r.i, exitTimeout)
		}
		if r.err != nil {
			return nil, r.failure("failed")
		}
		data, err := os.ReadFile(r.out)
		if err != nil {
			return nil, fmt.Errorf("replica %d: %w", r.i, err)
		}
		var out replicaResult
		if err := json.Unmarshal(data, &out); err != nil {
			return nil, fmt.Errorf("replica %d: its result: %w", r.i, err)
		}
		if !out.Window {
			return nil, fmt.Errorf("replica %d: no CPU reading at the window's start and end", r.i)
		}
		outs = append(outs, out)
	}
	return outs, nil
}

// kill kills the replicas still running and waits until every one has exited.
func (reps *replicas) kill() {
	for _, r := range reps.list {
		select {
		case <-r.done:
		default:
			_ = r.cmd.Process.Kill()
		}
	}
	for _, r := range reps.list {
		<-r.done
	}
}

// failure is an error about r, which has exited, quoting the end of its stderr.
func (r *replica) failure(what string) error {
	data, _ := os.ReadFile(r.stderr)
	if len(data) > stderrTail {
		data = data[len(data)-stderrTail:]
	}
	return fmt.Errorf("replica %d %s (%v); its stderr:\n%s", r.i, what, r.err, bytes.TrimSpace(data))
}

// logLines counts the lines of r's stderr (the scheduler logs to it) and returns the last.
func (r *replica) logLines() (int, string) {
	data, err := os.ReadFile(r.stderr)
	if err != nil {
		return 0, ""
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if lines[0] == "" {
		return 0, ""
	}
	return len(lines), lines[len(lines)-1]
}

// copyFile copies from to to, creating to's directory.
func copyFile(from, to string) error {
	data, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	return os.WriteFile(to, data, 0o644)
}

// readyLine is what a replica prints once it has started.
const readyLine = "ready\n"

// readyWriter is a replica's stdout: it closes ready when the replica prints readyLine first.
type readyWriter struct {
	ready chan struct{}
	seen  []byte
}

func (w *readyWriter) Write(p []byte) (int, error) {
	if len(w.seen) < len(readyLine) {
		w.seen = append(w.seen, p...)
		if bytes.HasPrefix(w.seen, []byte(readyLine)) {
			close(w.ready)
		}
	}
	return len(p), nil
}

// loadAverage is the machine's load average (/proc/loadavg's 1, 5 and 15 minutes), or "" where
// there is none.
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}
