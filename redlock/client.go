package redlock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Node is one independent Redis node as the lock sees it: anything that can run Lua scripts.
// *redis.Client is the usual one; a *redis.ClusterClient or a Sentinel-backed *redis.Client
// may stand as one node too (see Also for the hash-tag rule).
//
// Recommended go-redis options: ContextTimeoutEnabled: true (required: the node timeout is a
// context deadline), MaxRetries: -1 (a retry inside one node request would spend the lock's
// validity; the Client decides what to retry), and DisableIdentity: true (one round trip
// less in a new connection's handshake). After a request to a node fails, go-redis opens a
// new connection whose handshake (HELLO, and CLIENT SETINFO unless DisableIdentity) it sends
// within the next request's deadline; so the Client opens connections to that node in the
// background first, with the node's DialTimeout as deadline, and the next requests find them
// ready.
type Node = redis.Scripter

var (
	//go:embed scripts/acquire.lua
	acquireSrc    string
	acquireScript = newScript(acquireSrc)
	//go:embed scripts/extend.lua
	extendSrc    string
	extendScript = newScript(extendSrc)
	//go:embed scripts/release.lua
	releaseSrc    string
	releaseScript = newScript(releaseSrc)
	//go:embed scripts/fence.lua
	fenceSrc    string
	fenceScript = newScript(fenceSrc)
)

// Client takes locks on a set of independent Redis nodes. It is safe for concurrent use.
//
// Requests to nodes run in parallel and a call returns as soon as its outcome is decided, so a
// few requests may still be running when it returns; the Client owns them, and Close waits for
// them. Releases that a node missed are retried in the background until the lock has expired
// there; Close stops that. Close does not close the nodes' redis clients: they belong to the
// caller.
type Client struct {
	nodes  []Node
	names  []string
	quorum int
	cfg    config
	// allNodes lists every node's index; quarantineMillis is the acquire script's argument.
	allNodes         []int
	quarantineMillis string

	inflight sync.WaitGroup
	mu       sync.Mutex // guards closed against inflight.Add
	closed   bool
	// bg is cancelled by Close: background work (retried releases) stops.
	bg     context.Context
	stopBG context.CancelFunc

	contended  contention
	retries    []nodeRetries // by node
	unreleased pendingReleases
}

// New returns a Client over the given nodes. The nodes must be independent (not replicas of
// each other) and their number odd, unless WithEvenNodes is given.
func New(nodes []Node, opts ...Option) (*Client, error) {
	cfg := defaultConfig()
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("redlock: option %d is nil", i)
		}
		if err := o(&cfg); err != nil {
			return nil, err
		}
	}
	n := len(nodes)
	if n == 0 {
		return nil, errors.New("redlock: no nodes: give at least one Redis node, ideally 3 or 5 independent ones")
	}
	for i, nd := range nodes {
		if err := checkNode(i, nd); err != nil {
			return nil, err
		}
		for j := range i {
			if sameNode(nodes[j], nd) {
				return nil, fmt.Errorf("redlock: nodes %d and %d are the same node (%s): give independent nodes, or one node could form a quorum alone", j, i, nodeName(nd, i))
			}
		}
	}
	if err := perSlotKeys(&cfg, nodes); err != nil {
		return nil, err
	}
	if n%2 == 0 && !cfg.evenNodes {
		return nil, fmt.Errorf("redlock: %d nodes: use an odd number (an even count tolerates no more failures than one node less), or pass WithEvenNodes()", n)
	}
	if cfg.quorum == 0 {
		cfg.quorum = n/2 + 1
	}
	if cfg.quorum <= n/2 || cfg.quorum > n {
		return nil, fmt.Errorf("redlock: quorum %d with %d nodes: must be a majority, between %d and %d", cfg.quorum, n, n/2+1, n)
	}
	if cfg.maxWait == 0 {
		cfg.maxWait = cfg.maxTTL
	}
	c := &Client{nodes: nodes, names: make([]string, n), quorum: cfg.quorum, cfg: cfg,
		retries: make([]nodeRetries, n)}
	c.bg, c.stopBG = context.WithCancel(context.Background())
	for i, nd := range nodes {
		c.names[i] = nodeName(nd, i)
		c.allNodes = append(c.allNodes, i)
	}
	c.quarantineMillis = "0"
	if cfg.quarantine {
		c.quarantineMillis = formatMillis(cfg.maxTTL)
	}
	c.contended.window = cfg.contentionWindow
	return c, nil
}

// checkNode refuses nodes on which per-node timeouts could not be enforced.
func checkNode(i int, n Node) error {
	if n == nil {
		return fmt.Errorf("redlock: node %d is nil", i)
	}
	var enabled bool
	switch c := n.(type) {
	case *redis.Client:
		if c == nil {
			return fmt.Errorf("redlock: node %d is a nil *redis.Client", i)
		}
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		if c == nil {
			return fmt.Errorf("redlock: node %d is a nil *redis.ClusterClient", i)
		}
		enabled = c.Options().ContextTimeoutEnabled
	default:
		return nil
	}
	if !enabled {
		return fmt.Errorf("redlock: node %d (%s): set ContextTimeoutEnabled: true in its go-redis options, or a slow node would hold every call for the client's read timeout instead of the node timeout", i, nodeName(n, i))
	}
	return nil
}

// sameNode reports whether a and b are one node: the same value, or go-redis clients of the
// same address.
func sameNode(a, b Node) bool {
	switch a.(type) {
	case *redis.Client, *redis.ClusterClient:
		return nodeName(a, 0) == nodeName(b, 0)
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// quote returns s quoted for a message, cut to its first 64 bytes when longer.
func quote(s string) string {
	const limit = 64
	if len(s) <= limit {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%q… (%d bytes)", s[:limit], len(s))
}

func nodeName(n Node, i int) string {
	switch c := n.(type) {
	case *redis.Client:
		return c.Options().Addr
	case *redis.ClusterClient:
		return strings.Join(c.Options().Addrs, ",")
	}
	return fmt.Sprintf("node%d", i)
}

// Quorum returns the number of nodes that must agree.
func (c *Client) Quorum() int { return c.quorum }

// Nodes returns the number of nodes.
func (c *Client) Nodes() int { return len(c.nodes) }

// Close stops retrying the releases that nodes missed (those locks expire by their TTL) and
// waits for the node requests still running after their calls returned (each is bounded by
// the node timeout). Calls after Close fail with ErrClientClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.stopBG()
	c.inflight.Wait()
	return nil
}

// reply is one node's answer to one request.
type reply struct {
	node    int
	outcome outcome
	token   uint64
	holder  *Holder
	refusal *Refusal
	err     error
}

// start registers a node request with the Client, so that Close waits for it.
func (c *Client) start() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.inflight.Add(1)
	return true
}

// fanout sends call to each of the given nodes in parallel and passes the replies to decide,
// in arrival order, until decide returns true or every reply is in. It returns the replies that
// arrived after the decision but before fanout returned; replies that arrive later still are
// passed to late, in the goroutine of their request (late may be nil). With a nil decide it
// returns at once, and every reply is late. Every request shares one deadline, timeout from
// now, which lasts until the last request is done.
func (c *Client) fanout(ctx context.Context, nodes []int, timeout time.Duration,
	call func(ctx context.Context, node int) reply, decide func(reply) bool, late func(reply)) ([]reply, error) {
	f := &fan{ch: make(chan reply, len(nodes)), late: late, call: call, decided: decide == nil}
	f.ctx, f.cancel = context.WithTimeout(ctx, timeout)
	f.running.Store(int32(len(nodes)))
	for k, i := range nodes {
		if !c.start() {
			// Count the requests that will never run as done.
			if f.running.Add(-int32(len(nodes)-k)) == 0 {
				f.cancel()
			}
			return nil, ErrClientClosed
		}
		go f.ask(c, i)
	}
	if decide == nil {
		return nil, nil
	}
	for range nodes {
		if decide(<-f.ch) {
			break
		}
	}
	f.mu.Lock()
	f.decided = true
	f.mu.Unlock()
	var rest []reply
	for len(f.ch) > 0 {
		rest = append(rest, <-f.ch)
	}
	return rest, nil
}

// fan is the state of one fanout, shared by its requests.
type fan struct {
	ctx     context.Context
	cancel  context.CancelFunc
	running atomic.Int32 // requests not done yet; the last one cancels ctx
	call    func(ctx context.Context, node int) reply
	late    func(reply)
	ch      chan reply

	mu      sync.Mutex
	decided bool
}

// ask runs one node's request and hands its reply on.
func (f *fan) ask(c *Client, node int) {
	defer c.inflight.Done()
	r := f.call(f.ctx, node)
	if r.outcome == outcomeError {
		c.failed(node, r.err)
	}
	if f.running.Add(-1) == 0 {
		f.cancel()
	}
	f.mu.Lock()
	if !f.decided {
		f.ch <- r
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	if f.late != nil {
		f.late(r)
	}
}

// nodeError wraps err with the node's identity.
func (c *Client) nodeError(node int, err error) *NodeError {
	return &NodeError{Node: node, Name: c.names[node], Err: err}
}

// primary returns the node that is asked first and alone when a lock of the group (see
// primaryGroup) is contended.
func (c *Client) primary(group string) int {
	h := fnv.New32a()
	h.Write([]byte(group))
	return int(h.Sum32() % uint32(len(c.nodes)))
}

// hashTag returns the hash tag of key as Redis Cluster reads it — what lies between the first
// "{" and the first "}" after it, when not empty — and whether it has one.
func hashTag(key string) (string, bool) {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return "", false
	}
	tag, _, ok := strings.Cut(rest, "}")
	return tag, ok && tag != ""
}

// primaryGroup returns what a lock's primary node and contention are remembered by: the
// key's hash tag, so that the keys of one job (its ticks, its run key) share them, else the
// key.
func primaryGroup(key string) string {
	if tag, ok := hashTag(key); ok {
		return "{" + tag + "}"
	}
	return key
}

// MaxTTL returns the longest TTL a lock may ask for (WithMaxTTL).
func (c *Client) MaxTTL() time.Duration { return c.cfg.maxTTL }

// NodeTimeout returns how long one request to one node may take for a lock of the given TTL:
// WithNodeTimeout's value, or by default TTL/50 and at least 5ms.
func (c *Client) NodeTimeout(ttl time.Duration) time.Duration { return c.nodeTimeout(ttl) }

func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return max(ttl/50, 5*time.Millisecond)
}

// CheckTTL reports whether the client accepts ttl for a lock, as a *TTLError or nil, without
// any I/O.
func (c *Client) CheckTTL(ttl time.Duration) error {
	bad := func(format string, args ...any) error {
		return &TTLError{TTL: ttl, Problem: fmt.Sprintf(format, args...)}
	}
	if ttl <= 0 {
		return bad("is not positive: give e.g. 30s")
	}
	if ttl > c.cfg.maxTTL {
		return bad("is above the max TTL %v: ask for less, or raise WithMaxTTL (it is also how long a node that lost its memory stays in quarantine)", c.cfg.maxTTL)
	}
	if least := c.drift(ttl) + c.nodeTimeout(ttl); ttl <= least {
		return bad("leaves no validity after the drift allowance and node timeout (%v): use a longer TTL", least)
	}
	return nil
}

// drift is the clock drift allowance for a lock of the given TTL.
func (c *Client) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*c.cfg.driftFactor) + 2*time.Millisecond
}

// contention remembers which locks were recently seen held, by fence key.
type contention struct {
	window time.Duration
	mu     sync.Mutex
	seen   map[string]time.Time
	swept  time.Time // last sweep of expired entries
}

func (ct *contention) mark(key string, now time.Time) {
	if ct.window <= 0 {
		return
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.seen == nil {
		ct.seen = make(map[string]time.Time)
	}
	ct.seen[key] = now
	if now.Sub(ct.swept) > ct.window {
		ct.swept = now
		for k, t := range ct.seen {
			if now.Sub(t) > ct.window {
				delete(ct.seen, k)
			}
		}
	}
}

func (ct *contention) is(key string, now time.Time) bool {
	if ct.window <= 0 {
		return false
	}
	ct.mu.Lock()
	defer ct.mu.Unlock()
	t, ok := ct.seen[key]
	return ok && now.Sub(t) <= ct.window
}
