package nodes

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
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

// Member is one member of a Cluster, as CLUSTER SHARDS shows it.
type Member struct {
	Addr    string
	Primary bool
	Of      string   // a replica's primary
	Ranges  [][2]int // the slot ranges a primary serves, ascending
}

// Serves reports whether the member is the primary of slot.
func (m Member) Serves(slot int) bool {
	return slices.ContainsFunc(m.Ranges, func(r [2]int) bool { return r[0] <= slot && slot <= r[1] })
}

// Slots returns the slots the member serves, ascending.
func (m Member) Slots() []int {
	var out []int
	for _, r := range m.Ranges {
		for s := r[0]; s <= r[1]; s++ {
			out = append(out, s)
		}
	}
	return out
}

// Cluster is what one member of a Cluster says of it.
type Cluster struct {
	From    string            // the member that answered
	Info    map[string]string // its CLUSTER INFO
	Members map[string]Member
	Order   []string                 // the members' addresses: primaries by first slot, each replica after its primary
	clients map[string]*redis.Client // go-redis's client of each member it knows
}

// ReadCluster asks every member go-redis knows for CLUSTER INFO and CLUSTER SHARDS (Redis 7),
// and takes the first answer: a member that is down does not hide the others. It returns an
// error when none answers, or when cluster_state is not ok (with the view).
func ReadCluster(ctx context.Context, cc *redis.ClusterClient) (*Cluster, error) {
	var mu sync.Mutex
	v := &Cluster{clients: map[string]*redis.Client{}}
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
		v.From, v.Info = a.addr, ParseInfo(a.info.Val())
		v.Members, v.Order = topology(a.shards.Val())
		if state := v.Info["cluster_state"]; state != "ok" {
			return v, fmt.Errorf("cluster_state is %s, not ok (CLUSTER INFO of %s): the Cluster does not serve every slot", cmp.Or(state, "-"), a.addr)
		}
		return v, nil
	}
	slices.SortFunc(errs, func(a, b error) int { return strings.Compare(a.Error(), b.Error()) })
	return nil, fmt.Errorf("no member answers: %w", errors.Join(errs...))
}

// topology returns the members of a Cluster and the slots each primary serves, from CLUSTER
// SHARDS, with their addresses in order: primaries by first slot, each replica after its
// primary.
func topology(shards []redis.ClusterShard) (map[string]Member, []string) {
	first := func(s redis.ClusterShard) int {
		if len(s.Slots) == 0 {
			return hashslot.Count
		}
		return int(s.Slots[0].Start)
	}
	slices.SortFunc(shards, func(a, b redis.ClusterShard) int { return cmp.Compare(first(a), first(b)) })
	members := map[string]Member{}
	var order []string
	for _, s := range shards {
		// The primary first, its replicas after it.
		slices.SortStableFunc(s.Nodes, func(a, b redis.Node) int { return cmp.Compare(replicaRank(a), replicaRank(b)) })
		primary := ""
		if len(s.Nodes) > 0 && s.Nodes[0].Role == "master" {
			primary = nodeAddr(s.Nodes[0])
		}
		for _, n := range s.Nodes {
			m := Member{Addr: nodeAddr(n), Primary: n.Role == "master"}
			if m.Primary {
				for _, r := range s.Slots {
					m.Ranges = append(m.Ranges, [2]int{int(r.Start), int(r.End)})
				}
			} else {
				m.Of = primary
			}
			members[m.Addr] = m
			order = append(order, m.Addr)
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

// EachMember calls f, in parallel, for every member of the Cluster that go-redis knows (each
// primary and replica), with the member's place in the view, and waits.
func (v *Cluster) EachMember(ctx context.Context, f func(ctx context.Context, m Member, c *redis.Client)) {
	var wg sync.WaitGroup
	for addr, c := range v.clients {
		m, ok := v.Members[addr]
		if !ok {
			m = Member{Addr: addr}
		}
		wg.Go(func() { f(ctx, m, c) })
	}
	wg.Wait()
}

// SlotMarkers reads, on the primary c, the boot markers of slots (slots it serves) and its
// clock, in one round trip.
func SlotMarkers(ctx context.Context, c *redis.Client, bootKey string, slots []int) ([]Quarantine, error) {
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
	v, err := ReadCluster(ctx, cc)
	if err != nil {
		n.err = err
		return n
	}
	var mu sync.Mutex
	seen := 0
	var errs []error
	v.EachMember(ctx, func(ctx context.Context, m Member, c *redis.Client) {
		if !m.Primary {
			return
		}
		mine := slices.DeleteFunc(slices.Clone(slots), func(s int) bool { return !m.Serves(s) })
		if len(mine) == 0 {
			return
		}
		qs, err := SlotMarkers(ctx, c, bootKey, mine)
		mu.Lock()
		defer mu.Unlock()
		seen += len(mine)
		if err != nil {
			errs = append(errs, fmt.Errorf("primary %s of %d of the jobs' slots: %w", m.Addr, len(mine), err))
			return
		}
		for _, q := range qs {
			switch {
			case q.Missing:
				n.missingSlots++
			case q.Remaining > 0:
				n.quarantinedSlots++
				if until := time.Now().Add(q.Remaining); until.After(n.until) {
					n.until, n.marker = until, q.Value
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

// ParseInfo returns the fields of INFO or CLUSTER INFO's reply.
func ParseInfo(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":"); ok {
			out[k] = v
		}
	}
	return out
}
