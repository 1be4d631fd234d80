package nodes

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/internal/hashslot"
	"github.com/cronlock/cronlock/internal/layout"
)

// A lock node that is a Redis Cluster keeps one boot marker per hash slot (redlock.SlotBootKey),
// on the primary that serves the slot: check, locks and the readiness probe read it member by
// member, each primary's markers against its own clock.

// clusterMember is one member of a Cluster, as CLUSTER SHARDS shows it.
type clusterMember struct {
	addr    string
	primary bool
	of      string   // a replica's primary
	ranges  [][2]int // the slot ranges a primary serves, ascending
}

// serves reports whether the member is the primary of slot.
func (m clusterMember) serves(slot int) bool {
	return slices.ContainsFunc(m.ranges, func(r [2]int) bool { return r[0] <= slot && slot <= r[1] })
}

// slots returns the slots the member serves, ascending.
func (m clusterMember) slots() []int {
	var out []int
	for _, r := range m.ranges {
		for s := r[0]; s <= r[1]; s++ {
			out = append(out, s)
		}
	}
	return out
}

// describe says what the member is: "primary, slots 0-5460 (5461)", "replica of host:port".
func (m clusterMember) describe() string {
	if !m.primary {
		if m.of == "" {
			return "not in CLUSTER SHARDS (no slots)"
		}
		return "replica of " + m.of
	}
	return fmt.Sprintf("primary, slots %s (%d)", formatRanges(m.ranges), len(m.slots()))
}

// clusterView is what one member of a Cluster says of it.
type clusterView struct {
	from    string            // the member that answered
	info    map[string]string // its CLUSTER INFO
	members map[string]clusterMember
	order   []string                 // the members' addresses: primaries by first slot, each replica after its primary
	clients map[string]*redis.Client // go-redis's client of each member it knows
}

// readCluster asks every member go-redis knows for CLUSTER INFO and CLUSTER SHARDS (Redis 7),
// and takes the first answer: a member that is down does not hide the others. It returns an
// error when none answers, or when cluster_state is not ok (with the view).
func readCluster(ctx context.Context, cc *redis.ClusterClient) (*clusterView, error) {
	var mu sync.Mutex
	v := &clusterView{clients: map[string]*redis.Client{}}
	err := cc.ForEachShard(ctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		v.clients[c.Options().Addr] = c
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, err
	}
	type answer struct {
		addr   string
		info   *redis.StringCmd
		shards *redis.ClusterShardsCmd
		err    error
	}
	// Every member at once; the first that answers is taken, the others are cancelled.
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel
	askCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	answers := make(chan answer, len(v.clients))
	for addr, c := range v.clients {
		wg.Go(func() {
			pipe := c.Pipeline()
			a := answer{addr: addr, info: pipe.ClusterInfo(askCtx), shards: pipe.ClusterShards(askCtx)}
			_, a.err = pipe.Exec(askCtx)
			answers <- a
		})
	}
	var errs []error
	for range v.clients {
		a := <-answers
		if a.err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", a.addr, a.err))
			continue
		}
		v.from, v.info = a.addr, parseInfo(a.info.Val())
		v.members, v.order = topology(a.shards.Val())
		if state := v.info["cluster_state"]; state != "ok" {
			return v, fmt.Errorf("cluster_state is %s, not ok (CLUSTER INFO of %s): the Cluster does not serve every slot", dash(state), a.addr)
		}
		return v, nil
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return nil, fmt.Errorf("no member answers: %w", errors.Join(errs...))
}

// topology returns the members of a Cluster and the slots each primary serves, from CLUSTER
// SHARDS, with their addresses in order: primaries by first slot, each replica after its
// primary.
func topology(shards []redis.ClusterShard) (map[string]clusterMember, []string) {
	first := func(s redis.ClusterShard) int {
		if len(s.Slots) == 0 {
			return hashslot.Count
		}
		return int(s.Slots[0].Start)
	}
	slices.SortFunc(shards, func(a, b redis.ClusterShard) int { return cmp.Compare(first(a), first(b)) })
	members := map[string]clusterMember{}
	var order []string
	for _, s := range shards {
		// The primary first, its replicas after it.
		slices.SortStableFunc(s.Nodes, func(a, b redis.Node) int { return cmp.Compare(replicaRank(a), replicaRank(b)) })
		primary := ""
		if len(s.Nodes) > 0 && s.Nodes[0].Role == "master" {
			primary = nodeAddr(s.Nodes[0])
		}
		for _, n := range s.Nodes {
			m := clusterMember{addr: nodeAddr(n), primary: n.Role == "master"}
			if m.primary {
				for _, r := range s.Slots {
					m.ranges = append(m.ranges, [2]int{int(r.Start), int(r.End)})
				}
			} else {
				m.of = primary
			}
			members[m.addr] = m
			order = append(order, m.addr)
		}
	}
	return members, order
}

// replicaRank is 0 for a primary, 1 for any other member.
func replicaRank(n redis.Node) int {
	if n.Role == "master" {
		return 0
	}
	return 1
}

// nodeAddr is the address of a member as go-redis dials it: its endpoint and port (its TLS
// port when it has no plain one).
func nodeAddr(n redis.Node) string {
	port := n.Port
	if port == 0 {
		port = n.TLSPort
	}
	return net.JoinHostPort(n.Endpoint, strconv.FormatInt(port, 10))
}

// eachMember calls f, in parallel, for every member of the Cluster that go-redis knows (each
// primary and replica), with the member's place in the view, and waits.
func (v *clusterView) eachMember(ctx context.Context, f func(ctx context.Context, m clusterMember, c *redis.Client)) {
	var wg sync.WaitGroup
	for addr, c := range v.clients {
		m, ok := v.members[addr]
		if !ok {
			m = clusterMember{addr: addr}
		}
		wg.Go(func() { f(ctx, m, c) })
	}
	wg.Wait()
}

// slotMarkers reads, on the primary c, the boot markers of slots (slots it serves) and its
// clock, in one round trip.
func slotMarkers(ctx context.Context, c *redis.Client, bootKey string, slots []int) ([]quarantine, error) {
	keys := make([]string, len(slots))
	for i, s := range slots {
		keys[i] = hashslot.Key(bootKey, s)
	}
	return readMarkers(ctx, c, keys)
}

// jobSlots returns the hash slots of the jobs' keys ({prefix:job}:…), ascending, each once.
func jobSlots(cfg *config.Config) []int {
	var slots []int
	for _, j := range cfg.Jobs {
		slots = append(slots, hashslot.Of(layout.RunKey(cfg.Prefix, j.Name)))
	}
	slices.Sort(slots)
	return slices.Compact(slots)
}

// probeCluster finds the state of a Cluster node for readiness: down when cluster_state is not
// ok or a primary serving a slot of the jobs does not answer; without a marker, or in
// quarantine, when a slot of the jobs is (until the latest end among them).
func probeCluster(ctx context.Context, cc *redis.ClusterClient, bootKey string, slots []int) nodeState {
	var n nodeState
	v, err := readCluster(ctx, cc)
	if err != nil {
		n.err = err
		return n
	}
	var mu sync.Mutex
	seen := 0
	var errs []error
	v.eachMember(ctx, func(ctx context.Context, m clusterMember, c *redis.Client) {
		if !m.primary {
			return
		}
		mine := slices.DeleteFunc(slices.Clone(slots), func(s int) bool { return !m.serves(s) })
		if len(mine) == 0 {
			return
		}
		qs, err := slotMarkers(ctx, c, bootKey, mine)
		mu.Lock()
		defer mu.Unlock()
		seen += len(mine)
		if err != nil {
			errs = append(errs, fmt.Errorf("primary %s of %d of the jobs' slots: %w", m.addr, len(mine), err))
			return
		}
		for _, q := range qs {
			switch {
			case q.missing:
				n.missingSlots++
			case q.remaining > 0:
				n.quarantinedSlots++
				if until := time.Now().Add(q.remaining); until.After(n.until) {
					n.until, n.marker = until, q.value
				}
			}
		}
	})
	switch {
	case len(errs) > 0:
		n.err = errors.Join(errs...)
	case seen < len(slots):
		n.err = fmt.Errorf("%d of the jobs' %d hash slots are served by no primary", len(slots)-seen, len(slots))
	}
	n.missing = n.missingSlots > 0
	n.slots = len(slots)
	return n
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
	v, err := readCluster(ctx, cc)
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
		r.add("answers", "yes, cluster_state ok, %s of %d slots served", dash(v.info["cluster_slots_ok"]), hashslot.Count)
	}
	var mu sync.Mutex
	reports := map[string]*nodeReport{}
	var total slotCounts
	v.eachMember(ctx, func(ctx context.Context, m clusterMember, c *redis.Client) {
		mr := &nodeReport{addr: "member " + m.addr}
		mr.add("role", "%s", m.describe())
		checkNode(ctx, c, node.WaitForReplicas, mr, func(ctx context.Context, mr *nodeReport) {
			if m.primary {
				counts := checkSlotQuarantine(ctx, c, m.slots(), cfg, source, mr)
				mu.Lock()
				total.merge(counts)
				mu.Unlock()
			}
		})
		mu.Lock()
		reports[m.addr] = mr
		mu.Unlock()
	})
	primaries, down := 0, 0
	for _, addr := range v.order {
		mr := reports[addr]
		if mr == nil {
			continue // not known to go-redis yet
		}
		r.members = append(r.members, mr)
		delete(reports, addr)
		if v.members[addr].primary {
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
	qs, err := slotMarkers(ctx, c, cfg.BootKey, slots)
	if err != nil {
		r.add("quarantine", "unknown: %v", err)
		r.warn("could not read the boot markers of its slots (%s…): %v", hashslot.Key(cfg.BootKey, slots[0]), err)
		return slotCounts{}
	}
	s := slotCounts{slots: len(slots)}
	for i, q := range qs {
		switch {
		case q.missing:
			s.missing = append(s.missing, slots[i])
		case q.remaining > 0:
			s.quarantined++
			s.longest = max(s.longest, q.remaining)
		case !isDigits(q.value):
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
