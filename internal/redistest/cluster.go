package redistest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
	// clusterTimeout bounds how long NewCluster and Cluster.Restart wait for every member to
	// agree on the slot map with cluster_state:ok.
	clusterTimeout = 30 * time.Second
	// clusterNodeTimeout is the members' cluster-node-timeout, in milliseconds: long enough
	// that a member slowed down by a loaded machine is not failed by its peers.
	clusterNodeTimeout = "5000"
)

// Cluster is a Redis Cluster of primaries without replicas, each member a [Server] with
// cluster-enabled yes. The slots are split in contiguous ranges, member i serving the i-th.
// Members run with cluster-require-full-coverage no, so that the others keep serving their
// slots while one is down. All methods are safe for concurrent use.
type Cluster struct {
	members []*Server
	buses   []int // cluster bus port of each member
	first   []int // first slot of each member; member i serves first[i] to first[i+1]-1

	mu     sync.Mutex
	client *redis.ClusterClient
	closed bool
}

// NewCluster starts a Cluster of the given number of primaries on free 127.0.0.1 ports (each
// member with a cluster bus port of its own), assigns the slots (CLUSTER ADDSLOTSRANGE),
// introduces the members (CLUSTER MEET) and returns once every member reports
// cluster_state:ok and the same slot map. With cfg.Dir, member i uses Dir/member<i>. The
// caller must Close it.
func NewCluster(primaries int, cfg Config) (*Cluster, error) {
	if primaries < 1 {
		return nil, fmt.Errorf("redistest: a cluster of %d primaries: give at least 1", primaries)
	}
	c := &Cluster{members: make([]*Server, primaries), buses: make([]int, primaries), first: make([]int, primaries+1)}
	errs := make([]error, primaries)
	var wg sync.WaitGroup
	for i := range primaries {
		c.first[i] = i * clusterSlots / primaries
		mc := cfg
		if cfg.Dir != "" {
			mc.Dir = filepath.Join(cfg.Dir, fmt.Sprintf("member%d", i))
		}
		wg.Go(func() { c.members[i], c.buses[i], errs[i] = newMember(mc) })
	}
	c.first[primaries] = clusterSlots
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		_ = c.Close()
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	if err := c.form(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// newMember starts one cluster-enabled server and returns it with its cluster bus port. The
// bus port is chosen free like the port (port+10000, Redis's default, may be out of range or
// taken); a start that fails because a port was taken is tried again with other ports.
func newMember(cfg Config) (*Server, int, error) {
	var err error
	for range bindAttempts {
		var bus int
		if bus, err = freePort(); err != nil {
			return nil, 0, err
		}
		mc := cfg
		mc.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-node-timeout", clusterNodeTimeout,
			"--cluster-require-full-coverage", "no",
		}, cfg.Args...)
		var s *Server
		if s, err = New(mc); err == nil || !errors.Is(err, errPortInUse) {
			return s, bus, err
		}
	}
	return nil, 0, err
}

// form assigns each member its slots and introduces it to the first member, then waits until
// the members agree.
func (c *Cluster) form(ctx context.Context) error {
	for i, m := range c.members {
		rc := m.Client()
		if err := rc.ClusterAddSlotsRange(ctx, c.first[i], c.first[i+1]-1).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER ADDSLOTSRANGE on %s: %w", m.Addr(), err)
		}
		if i == 0 {
			continue
		}
		host, port, _ := strings.Cut(c.members[0].Addr(), ":")
		if err := rc.Do(ctx, "cluster", "meet", host, port, c.buses[0]).Err(); err != nil {
			return fmt.Errorf("redistest: CLUSTER MEET from %s: %w", m.Addr(), err)
		}
	}
	return c.waitAgreed(ctx)
}

// waitAgreed polls every member until each reports cluster_state:ok, knows every member and
// has every slot served, and all report the same slot map.
func (c *Cluster) waitAgreed(ctx context.Context) error {
	delay := time.Millisecond
	for {
		err := c.agreed(ctx)
		if err == nil {
			return nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("redistest: cluster %s did not settle: %w (last: %v)", strings.Join(c.Addrs(), ","), ctx.Err(), err)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// agreed returns why the members do not agree yet, or nil.
func (c *Cluster) agreed(ctx context.Context) error {
	var maps []string
	for _, m := range c.members {
		rc := m.Client()
		info, err := rc.ClusterInfo(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER INFO: %w", m.Addr(), err)
		}
		for _, want := range []string{"cluster_state:ok", "cluster_slots_ok:" + strconv.Itoa(clusterSlots),
			"cluster_known_nodes:" + strconv.Itoa(len(c.members))} {
			if !strings.Contains(info, want+"\r\n") {
				return fmt.Errorf("%s: no %s yet", m.Addr(), want)
			}
		}
		shards, err := rc.ClusterShards(ctx).Result()
		if err != nil {
			return fmt.Errorf("%s: CLUSTER SHARDS: %w", m.Addr(), err)
		}
		var ranges []string
		for _, sh := range shards {
			if len(sh.Nodes) == 0 {
				return fmt.Errorf("%s: a shard has no node", m.Addr())
			}
			for _, r := range sh.Slots {
				ranges = append(ranges, fmt.Sprintf("%d-%d:%s", r.Start, r.End, sh.Nodes[0].ID))
			}
		}
		slices.Sort(ranges)
		maps = append(maps, strings.Join(ranges, " "))
	}
	for i, m := range maps {
		if m != maps[0] {
			return fmt.Errorf("%s and %s see different slot maps: %q, %q", c.members[0].Addr(), c.members[i].Addr(), maps[0], m)
		}
	}
	return nil
}

// Members returns the cluster's servers, member i serving the i-th range of slots.
func (c *Cluster) Members() []*Server { return slices.Clone(c.members) }

// Addrs returns the members' addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.members))
	for i, m := range c.members {
		addrs[i] = m.Addr()
	}
	return addrs
}

// Member returns the index of the member that serves slot.
func (c *Cluster) Member(slot int) int {
	i, found := slices.BinarySearch(c.first, slot)
	if !found {
		i--
	}
	return i
}

// MemberOf returns the index of the member that serves key's slot, as the cluster computes it
// (CLUSTER KEYSLOT).
func (c *Cluster) MemberOf(ctx context.Context, key string) (int, error) {
	slot, err := c.Client().ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT %s: %w", key, err)
	}
	return c.Member(int(slot)), nil
}

// Client returns a go-redis cluster client of the members, created on first use and closed by
// Close. Like Server.Client it has ContextTimeoutEnabled set and otherwise go-redis defaults,
// for inspecting the cluster.
func (c *Cluster) Client() *redis.ClusterClient {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == nil {
		c.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
		if c.closed {
			_ = c.client.Close()
		}
	}
	return c.client
}

// Restart kills member i and starts it again on the same ports and directory. Without AOF it
// comes back with no data but with its cluster configuration (nodes.conf, which Redis writes
// on every change), so it re-joins with the same identity and slots — as a primary restarted
// without persistence does. Restart returns once every member agrees again (see NewCluster).
func (c *Cluster) Restart(i int) error {
	if err := c.members[i].Restart(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterTimeout)
	defer cancel()
	return c.waitAgreed(ctx)
}

// Close closes the client and every member. It is idempotent.
func (c *Cluster) Close() error {
	c.mu.Lock()
	c.closed = true
	var errs []error
	if c.client != nil {
		errs = append(errs, c.client.Close())
		c.client = nil
	}
	c.mu.Unlock()
	for _, m := range c.members {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}
