package nodes

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/exitcode"
	"github.com/cronlock/cronlock/internal/hashslot"
)

// maxClockOffset is the node clock offset above which check warns.
const maxClockOffset = 500 * time.Millisecond

// Check checks every node of cfg, each within timeout, and prints what it found to stdout,
// with a warning and its fix for each problem (cronlock check). With endQuarantine it first
// ends every node's quarantine. source is the flag that named the nodes, in the fixes
// ("--config FILE" or "--nodes a,b,c"). It fails when fewer than a quorum of nodes answer.
func Check(ctx context.Context, cfg *config.Config, source string, endQuarantine bool, timeout time.Duration, stdout, stderr io.Writer) error {
	clients, err := Clients(cfg)
	if err != nil {
		return err
	}
	defer Close(clients)

	if endQuarantine {
		locks, err := LockClient(cfg, clients, DefaultReplica())
		if err != nil {
			return exitcode.Usage{Err: fmt.Errorf("%s: nodes: %w", cfg.File, err)}
		}
		qctx, cancel := context.WithTimeout(ctx, timeout)
		err = locks.EndQuarantine(qctx)
		cancel()
		_ = locks.Close()
		switch {
		case err != nil:
			fmt.Fprintf(stderr, "warning: could not end the quarantine of every node: %v\n", err)
		case cfg.Nodes[0].Cluster != nil:
			fmt.Fprintf(stdout, "quarantine ended on every node (the boot markers of all %d hash slots, %s, set to 0)\n\n", hashslot.Count, hashslot.Key(cfg.BootKey, 0)+"…")
		default:
			fmt.Fprintf(stdout, "quarantine ended on every node (boot marker %s set to 0)\n\n", cfg.BootKey)
		}
	}

	reports := make([]*nodeReport, len(clients))
	eachNode(ctx, clients, timeout, func(ctx context.Context, i int, c redis.UniversalClient) {
		node := cfg.Nodes[i]
		if cc, ok := c.(*redis.ClusterClient); ok {
			reports[i] = checkCluster(ctx, cc, node, cfg, source)
		} else {
			reports[i] = &nodeReport{addr: node.Name()}
			checkNode(ctx, c.(*redis.Client), node.WaitForReplicas, reports[i], func(ctx context.Context, r *nodeReport) {
				checkQuarantine(ctx, c, cfg, source, r)
			})
		}
	})
	answered := 0
	var warnings []string
	for _, r := range reports {
		r.print(stdout, "")
		if r.err == nil {
			answered++
		}
		warnings = append(warnings, r.allWarnings("")...)
	}
	fmt.Fprintf(stdout, "%d of %d nodes answer, quorum %d\n", answered, len(clients), cfg.Quorum())
	if len(warnings) == 0 {
		fmt.Fprintln(stdout, "no warnings")
	} else {
		fmt.Fprintf(stdout, "\n%d warnings:\n", len(warnings))
		for _, w := range warnings {
			fmt.Fprintf(stdout, "- %s\n", w)
		}
	}
	if answered < cfg.Quorum() {
		return fmt.Errorf("only %d of %d nodes answer, fewer than the quorum of %d: no lock can be taken", answered, len(clients), cfg.Quorum())
	}
	return nil
}

// nodeReport is what check found on one node, or on one member of a Cluster node.
type nodeReport struct {
	addr     string
	err      error // the node does not answer
	lines    [][2]string
	warnings []string
	members  []*nodeReport // a Cluster's
}

func (r *nodeReport) add(name, format string, args ...any) {
	r.lines = append(r.lines, [2]string{name, fmt.Sprintf(format, args...)})
}

func (r *nodeReport) warn(format string, args ...any) {
	r.warnings = append(r.warnings, fmt.Sprintf(format, args...))
}

var printMu sync.Mutex

func (r *nodeReport) print(w io.Writer, indent string) {
	printMu.Lock()
	defer printMu.Unlock()
	r.write(w, indent)
}

func (r *nodeReport) write(w io.Writer, indent string) {
	fmt.Fprintln(w, indent+r.addr)
	for _, l := range r.lines {
		fmt.Fprintf(w, "%s  %-11s %s\n", indent, l[0], l[1])
	}
	for _, m := range r.members {
		m.write(w, indent+"  ")
	}
	if indent == "" {
		fmt.Fprintln(w)
	}
}

// allWarnings returns the node's warnings and its members', each after what it is about.
func (r *nodeReport) allWarnings(prefix string) []string {
	var out []string
	for _, w := range r.warnings {
		out = append(out, prefix+r.addr+": "+w)
	}
	for _, m := range r.members {
		out = append(out, m.allWarnings(prefix+r.addr+": ")...)
	}
	return out
}

// checkNode runs every check on one server into r, with quarantine the check of its boot
// markers; wantReplicas is the node's wait_for_replicas.
func checkNode(ctx context.Context, c *redis.Client, wantReplicas int, r *nodeReport, quarantine func(context.Context, *nodeReport)) {
	t0 := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		r.err = err
		r.add("answers", "no: %v", err)
		r.warn("does not answer (%v). Fix: check the address and port, the firewall, that redis-server runs, and the node's username and password_env", err)
		return
	}
	r.add("answers", "yes, PING %v", time.Since(t0).Round(10*time.Microsecond))

	// One INFO (its default sections: server, persistence, replication…) for every check.
	info, infoErr := infoSection(ctx, c, "default")
	version := info["redis_version"]
	r.add("version", "%s", dash(version))
	if major, _, _ := strings.Cut(version, "."); version != "" {
		if m, err := strconv.Atoi(major); err == nil && m < 5 {
			r.warn("Redis %s is too old: cronlock's scripts read the node's TIME before writing, which needs Redis 5 or later. Fix: upgrade the node", version)
		}
	}

	checkPersistence(ctx, c, info, infoErr, r)
	checkEviction(ctx, c, r)
	checkReplication(info, infoErr, wantReplicas, r)
	quarantine(ctx, r)
	checkClock(ctx, c, r)
}

// infoSection returns the fields of one INFO section ("default": the default sections).
func infoSection(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}

// parseInfo returns the fields of INFO or CLUSTER INFO's reply.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// configGet returns one CONFIG GET parameter.
func configGet(ctx context.Context, c *redis.Client, name string) (string, error) {
	m, err := c.ConfigGet(ctx, name).Result()
	if err != nil {
		return "", err
	}
	v, ok := m[name]
	if !ok {
		return "", fmt.Errorf("CONFIG GET %s: no such parameter", name)
	}
	return v, nil
}

// checkPersistence reads the persistence fields of info, the node's INFO (err: why not read).
func checkPersistence(ctx context.Context, c *redis.Client, info map[string]string, err error, r *nodeReport) {
	if err != nil {
		r.add("persistence", "unknown: INFO persistence: %v", err)
		return
	}
	aof := info["aof_enabled"] == "1"
	fsync, ferr := configGet(ctx, c, "appendfsync")
	save, serr := configGet(ctx, c, "save")
	switch {
	case aof && ferr != nil:
		r.add("persistence", "AOF on, appendfsync unknown (%v)", ferr)
		r.warn("AOF is on but its appendfsync could not be read (%v). Fix: make sure it is appendfsync always in redis.conf", ferr)
	case aof && fsync == "always":
		r.add("persistence", "AOF on, appendfsync always: locks survive a restart")
	case aof:
		r.add("persistence", "AOF on, appendfsync %s", fsync)
		r.warn("AOF with appendfsync %s can lose the last writes in a crash: the node then comes back with its boot marker (so no quarantine) but without its latest locks. Fix: CONFIG SET appendfsync always and put appendfsync always in redis.conf, or turn persistence off and let the quarantine cover restarts", fsync)
	case serr != nil:
		r.add("persistence", "AOF off, RDB snapshots unknown (%v)", serr)
		r.warn("could not read the save setting (%v). Fix: make sure redis.conf has save \"\" or AOF with appendfsync always", serr)
	case strings.TrimSpace(save) != "":
		r.add("persistence", "AOF off, RDB snapshots on (save %q)", save)
		r.warn("RDB snapshots without AOF: after a restart the node reloads an old snapshot, with its boot marker but without its latest locks, and skips its quarantine. Fix: CONFIG SET save \"\" and put save \"\" in redis.conf, or turn on AOF with appendfsync always")
	default:
		r.add("persistence", "none: a restarted node comes back empty, and its quarantine covers it")
	}
}

func checkEviction(ctx context.Context, c *redis.Client, r *nodeReport) {
	policy, err := configGet(ctx, c, "maxmemory-policy")
	switch {
	case err != nil:
		r.add("eviction", "maxmemory-policy unknown (%v)", err)
		r.warn("could not read maxmemory-policy (%v). Fix: make sure redis.conf has maxmemory-policy noeviction", err)
	case policy != "noeviction":
		r.add("eviction", "maxmemory-policy %s", policy)
		r.warn("maxmemory-policy is %s: under memory pressure the node may evict fencing counters and boot markers, which have no TTL, and break the order of fencing tokens. Fix: CONFIG SET maxmemory-policy noeviction, and put maxmemory-policy noeviction in redis.conf", policy)
	default:
		r.add("eviction", "maxmemory-policy noeviction")
	}
}

// checkReplication reports the server's role and its connected replicas from info, the
// node's INFO (err: why not read), and warns when fewer are connected than wait_for_replicas
// asks to acknowledge each lock.
func checkReplication(info map[string]string, err error, want int, r *nodeReport) {
	if err != nil {
		r.add("replicas", "unknown: INFO replication: %v", err)
		if want > 0 {
			r.warn("could not read its replicas (%v), and wait_for_replicas is %d: make sure the node has that many replicas", err, want)
		}
		return
	}
	if role := info["role"]; role != "master" {
		r.add("replicas", "none: the server is a replica (role %s)", dash(role))
		return
	}
	connected, _ := strconv.Atoi(info["connected_slaves"])
	r.add("replicas", "%d connected, wait_for_replicas %d", connected, want)
	if connected < want {
		r.warn("%d replicas connected, fewer than wait_for_replicas %d: no lock counts on this node until %d acknowledge it (the tick ends quorum_unavailable when a quorum of nodes cannot). Fix: start or reconnect its replicas, or lower wait_for_replicas", connected, want, want)
	}
}

func checkQuarantine(ctx context.Context, c redis.UniversalClient, cfg *config.Config, source string, r *nodeReport) {
	q, err := readQuarantine(ctx, c, cfg.BootKey)
	switch {
	case err != nil:
		r.add("quarantine", "unknown: %v", err)
		r.warn("could not read the boot marker %s: %v", cfg.BootKey, err)
	case q.missing:
		r.add("quarantine", "no boot marker (%s)", cfg.BootKey)
		r.warn("no boot marker %s: the node is new, or lost its memory; the first lock attempt starts its quarantine, and it refuses locks for max_ttl (%v). Fix, on first deployment only: cronlock check %s --end-quarantine", cfg.BootKey, cfg.MaxTTL, source)
	case q.value == "0":
		r.add("quarantine", "none: ended by an operator (%s is 0)", cfg.BootKey)
	case q.remaining > 0:
		r.add("quarantine", "IN QUARANTINE for %v more: refuses locks until then", q.remaining.Round(time.Millisecond))
		r.warn("in quarantine for %v more (it was new, or restarted without its data): it refuses locks until then, and the other nodes must make the quorum. It ends by itself; on first deployment only, cronlock check %s --end-quarantine ends it now", q.remaining.Round(time.Millisecond), source)
	case q.value != "" && q.remaining == 0 && !isDigits(q.value):
		r.add("quarantine", "boot marker %s has an unexpected value", cfg.BootKey)
		r.warn("boot marker %s does not hold a time: is the key used by something else? Fix: give cronlock its own boot_key", cfg.BootKey)
	default:
		r.add("quarantine", "none: ended %v ago", (-q.remaining).Round(time.Second))
	}
}

func isDigits(s string) bool {
	_, err := strconv.ParseUint(s, 10, 64)
	return err == nil
}

func checkClock(ctx context.Context, c *redis.Client, r *nodeReport) {
	t0 := time.Now()
	nodeTime, err := c.Time(ctx).Result()
	t1 := time.Now()
	if err != nil {
		r.add("clock", "unknown: TIME: %v", err)
		return
	}
	rtt := t1.Sub(t0)
	offset := nodeTime.Sub(t0.Add(rtt / 2))
	r.add("clock", "%s this host's (±%v)", describeOffset(offset), (rtt / 2).Round(10*time.Microsecond))
	if offset > maxClockOffset || offset < -maxClockOffset {
		r.warn("its clock is %s this host's: lock TTLs and tick instants assume clocks within %v. Fix: run NTP (e.g. chrony) on the node and on every cronlock host, slewing rather than stepping", describeOffset(offset), maxClockOffset)
	}
}

func describeOffset(d time.Duration) string {
	d = d.Round(10 * time.Microsecond)
	switch {
	case d > 0:
		return fmt.Sprintf("%v ahead of", d)
	case d < 0:
		return fmt.Sprintf("%v behind", -d)
	}
	return "the same as"
}
