// Package check is `cronlock check`: the health of every lock node — whether it answers and
// how fast, its version, persistence, eviction policy, replicas, boot marker (quarantine) and
// clock offset — each problem with a warning that says how to fix it. A node that is a Redis
// Cluster is checked member by member, through package nodes' view of the Cluster. It writes
// no key but the boot markers (Check with endQuarantine).
package check

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/exitcode"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/internal/hashslot"
)

// maxClockOffset is the node clock offset above which check warns.
const maxClockOffset = 500 * time.Millisecond

// Check checks every node of cfg, each within timeout, and prints what it found to stdout,
// with a warning and its fix for each problem (cronlock check). With endQuarantine it first
// ends every node's quarantine. source is the flag that named the nodes, in the fixes
// ("--config FILE" or "--nodes a,b,c"). It fails when fewer than a quorum of nodes answer.
func Check(ctx context.Context, cfg *config.Config, source string, endQuarantine bool, timeout time.Duration, stdout, stderr io.Writer) error {
	clients, err := nodes.Clients(cfg)
	if err != nil {
		return err
	}
	defer nodes.Close(clients)

	if endQuarantine {
		locks, err := nodes.LockClient(cfg, clients, nodes.DefaultReplica())
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
	nodes.EachNode(ctx, clients, timeout, func(ctx context.Context, i int, c redis.UniversalClient) {
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
	r.add("version", "%s", cmp.Or(version, "-"))
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
	return nodes.ParseInfo(s), nil
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
		r.add("replicas", "none: the server is a replica (role %s)", cmp.Or(role, "-"))
		return
	}
	connected, _ := strconv.Atoi(info["connected_slaves"])
	r.add("replicas", "%d connected, wait_for_replicas %d", connected, want)
	if connected < want {
		r.warn("%d replicas connected, fewer than wait_for_replicas %d: no lock counts on this node until %d acknowledge it (the tick ends quorum_unavailable when a quorum of nodes cannot). Fix: start or reconnect its replicas, or lower wait_for_replicas", connected, want, want)
	}
}

func checkQuarantine(ctx context.Context, c redis.UniversalClient, cfg *config.Config, source string, r *nodeReport) {
	q, err := nodes.ReadQuarantine(ctx, c, cfg.BootKey)
	switch {
	case err != nil:
		r.add("quarantine", "unknown: %v", err)
		r.warn("could not read the boot marker %s: %v", cfg.BootKey, err)
	case q.Missing:
		r.add("quarantine", "no boot marker (%s)", cfg.BootKey)
		r.warn("no boot marker %s: the node is new, or lost its memory; the first lock attempt starts its quarantine, and it refuses locks for max_ttl (%v). Fix, on first deployment only: cronlock check %s --end-quarantine", cfg.BootKey, cfg.MaxTTL, source)
	case q.Value == "0":
		r.add("quarantine", "none: ended by an operator (%s is 0)", cfg.BootKey)
	case q.Remaining > 0:
		r.add("quarantine", "IN QUARANTINE for %v more: refuses locks until then", q.Remaining.Round(time.Millisecond))
		r.warn("in quarantine for %v more (it was new, or restarted without its data): it refuses locks until then, and the other nodes must make the quorum. It ends by itself; on first deployment only, cronlock check %s --end-quarantine ends it now", q.Remaining.Round(time.Millisecond), source)
	case q.Value != "" && q.Remaining == 0 && !isDigits(q.Value):
		r.add("quarantine", "boot marker %s has an unexpected value", cfg.BootKey)
		r.warn("boot marker %s does not hold a time: is the key used by something else? Fix: give cronlock its own boot_key", cfg.BootKey)
	default:
		r.add("quarantine", "none: ended %v ago", (-q.Remaining).Round(time.Second))
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

// describe says what m is: "primary, slots 0-5460 (5461)", "replica of host:port".
func describe(m nodes.Member) string {
	if !m.Primary {
		if m.Of == "" {
			return "not in CLUSTER SHARDS (no slots)"
		}
		return "replica of " + m.Of
	}
	return fmt.Sprintf("primary, slots %s (%d)", formatRanges(m.Ranges), len(m.Slots()))
}

// formatRanges writes slot ranges as "0-5460, 10923-16383", the first few only.
func formatRanges(ranges [][2]int) string {
	const most = 4
	var parts []string
	for _, r := range ranges[:min(len(ranges), most)] {
		if r[0] == r[1] {
			parts = append(parts, fmt.Sprint(r[0]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", r[0], r[1]))
		}
	}
	if len(ranges) > most {
		parts = append(parts, fmt.Sprintf("… (%d ranges)", len(ranges)))
	}
	return strings.Join(parts, ", ")
}

// toRanges groups ascending slots into ranges.
func toRanges(slots []int) [][2]int {
	var out [][2]int
	for _, s := range slots {
		if k := len(out) - 1; k >= 0 && out[k][1] == s-1 {
			out[k][1] = s
		} else {
			out = append(out, [2]int{s, s})
		}
	}
	return out
}

// checkCluster runs check on a Cluster node: its state (CLUSTER INFO), then every member as a
// server, with each primary's boot markers summed up over the slots it serves. The node
// answers when its cluster_state is ok and every primary answers.
func checkCluster(ctx context.Context, cc *redis.ClusterClient, node config.Node, cfg *config.Config, source string) *nodeReport {
	r := &nodeReport{addr: node.Name()}
	v, err := nodes.ReadCluster(ctx, cc)
	switch {
	case v == nil:
		r.err = err
		r.add("answers", "no: %v", err)
		r.warn("does not answer (%v). Fix: check the members' addresses and ports, the firewall, that redis-server runs with cluster-enabled yes, and the node's username and password_env", err)
		return r
	case err != nil:
		r.err = err
		r.add("answers", "yes, but %v", err)
		r.warn("%v: a slot that no primary serves takes no lock on this node. Fix: CLUSTER INFO and CLUSTER NODES on a member show which; bring its primary back, or assign the slots", err)
	default:
		r.add("answers", "yes, cluster_state ok, %s of %d slots served", cmp.Or(v.Info["cluster_slots_ok"], "-"), hashslot.Count)
	}
	var mu sync.Mutex
	reports := map[string]*nodeReport{}
	var total slotCounts
	v.EachMember(ctx, func(ctx context.Context, m nodes.Member, c *redis.Client) {
		mr := &nodeReport{addr: "member " + m.Addr}
		mr.add("role", "%s", describe(m))
		checkNode(ctx, c, node.WaitForReplicas, mr, func(ctx context.Context, mr *nodeReport) {
			if m.Primary {
				counts := checkSlotQuarantine(ctx, c, m.Slots(), cfg, source, mr)
				mu.Lock()
				total.merge(counts)
				mu.Unlock()
			}
		})
		mu.Lock()
		reports[m.Addr] = mr
		mu.Unlock()
	})
	primaries, down := 0, 0
	for _, addr := range v.Order {
		mr := reports[addr]
		if mr == nil {
			continue // not known to go-redis yet
		}
		r.members = append(r.members, mr)
		delete(reports, addr)
		if v.Members[addr].Primary {
			primaries++
			if mr.err != nil {
				down++
			}
		}
	}
	for _, addr := range slices.Sorted(maps.Keys(reports)) {
		r.members = append(r.members, reports[addr])
	}
	r.add("members", "%d primaries (%d answer), %d replicas or others", primaries, primaries-down, len(r.members)-primaries)
	if down > 0 && r.err == nil {
		r.err = fmt.Errorf("%d of %d primaries do not answer", down, primaries)
	}
	if total.slots < hashslot.Count {
		total.unserved = hashslot.Count - total.slots
	}
	r.add("quarantine", "%s", total)
	return r
}

// slotCounts sums up the boot markers of some slots.
type slotCounts struct {
	slots       int
	out         int           // out of quarantine
	quarantined int           // in quarantine…
	longest     time.Duration // …for up to this long
	missing     []int         // the slots without a marker
	unexpected  []int         // the slots whose marker holds no time
	unserved    int           // slots no primary answered for (a Cluster's total only)
}

func (s *slotCounts) merge(o slotCounts) {
	s.slots += o.slots
	s.out += o.out
	s.quarantined += o.quarantined
	s.longest = max(s.longest, o.longest)
	s.missing = append(s.missing, o.missing...)
	s.unexpected = append(s.unexpected, o.unexpected...)
}

func (s slotCounts) String() string {
	parts := []string{fmt.Sprintf("%d out of quarantine", s.out)}
	if s.quarantined > 0 {
		parts = append(parts, fmt.Sprintf("%d IN QUARANTINE for up to %v more", s.quarantined, s.longest.Round(time.Millisecond)))
	}
	if len(s.missing) > 0 {
		slices.Sort(s.missing)
		parts = append(parts, fmt.Sprintf("%d without boot marker (slots %s)", len(s.missing), formatRanges(toRanges(s.missing))))
	}
	if len(s.unexpected) > 0 {
		parts = append(parts, fmt.Sprintf("%d with a marker that holds no time", len(s.unexpected)))
	}
	if s.unserved > 0 {
		parts = append(parts, fmt.Sprintf("%d not read (no primary answered for them)", s.unserved))
	}
	return fmt.Sprintf("%d slots: %s", s.slots+s.unserved, strings.Join(parts, ", "))
}

// checkSlotQuarantine reads the boot markers of the slots a primary serves, adds their summary
// to r with a warning for each kind of problem, and returns it.
func checkSlotQuarantine(ctx context.Context, c *redis.Client, slots []int, cfg *config.Config, source string, r *nodeReport) slotCounts {
	qs, err := nodes.SlotMarkers(ctx, c, cfg.BootKey, slots)
	if err != nil {
		r.add("quarantine", "unknown: %v", err)
		r.warn("could not read the boot markers of its slots (%s…): %v", hashslot.Key(cfg.BootKey, slots[0]), err)
		return slotCounts{}
	}
	s := slotCounts{slots: len(slots)}
	for i, q := range qs {
		switch {
		case q.Missing:
			s.missing = append(s.missing, slots[i])
		case q.Remaining > 0:
			s.quarantined++
			s.longest = max(s.longest, q.Remaining)
		case !isDigits(q.Value):
			s.unexpected = append(s.unexpected, slots[i])
		default:
			s.out++
		}
	}
	r.add("quarantine", "%s", s)
	if n := len(s.missing); n > 0 {
		r.warn("%d of its slots have no boot marker (slots %s): the member is new, or restarted without its data; a lock of such a slot starts the slot's quarantine, and this node refuses it for max_ttl (%v). Fix, on first deployment only: cronlock check %s --end-quarantine", n, formatRanges(toRanges(s.missing)), cfg.MaxTTL, source)
	}
	if s.quarantined > 0 {
		r.warn("%d of its slots are in quarantine for up to %v more (the member was new, or restarted without its data): this node refuses their locks until then, and the other nodes must make the quorum. It ends by itself; on first deployment only, cronlock check %s --end-quarantine ends it now", s.quarantined, s.longest.Round(time.Millisecond), source)
	}
	if n := len(s.unexpected); n > 0 {
		r.warn("%d boot markers of its slots (e.g. %s) do not hold a time: is the key used by something else? Fix: give cronlock its own boot_key", n, hashslot.Key(cfg.BootKey, s.unexpected[0]))
	}
	return s
}
