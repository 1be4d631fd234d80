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

	"github.com/cronlock/cronlock/internal/hashslot"
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
// background first, with a deadline of the node's DialTimeout but at most 4 node timeouts
// (WithNodeTimeout), and the next requests find them ready.
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
	// allNodes lists every node's index; quarantineMillis and label are acquire script
	// arguments, boxed once.
	allNodes         []int
	quarantineMillis any
	label            any

	inflight sync.WaitGroup
	mu       sync.Mutex // guards closed and running against inflight.Add, and leases
	running  int        // goroutines started and not done
	closed   bool
	ending   bool                // Close has begun: no new lease
	leases   map[*Lease]struct{} // the leases not closed yet
	// bg is cancelled by Close: background work (retried releases) stops.
	bg     context.Context
	stopBG context.CancelFunc

	links      []link // by node
	lastTTL    atomic.Pointer[ttlArg]
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
	if err := cfg.countReplicas(n); err != nil {
		return nil, err
	}
	c := &Client{nodes: nodes, names: make([]string, n), quorum: cfg.quorum, cfg: cfg,
		retries: make([]nodeRetries, n), links: make([]link, n)}
	c.bg, c.stopBG = context.WithCancel(context.Background())
	for i, nd := range nodes {
		c.names[i] = nodeName(nd, i)
		c.links[i].node = nd
		c.links[i].wake = make(chan struct{}, maxBatches)
		c.allNodes = append(c.allNodes, i)
	}
	c.quarantineMillis, c.label = "0", cfg.label
	if cfg.quarantine {
		c.quarantineMillis = formatMillis(cfg.maxTTL)
	}
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

// Close ends the Client's work, bounded by its node timeouts, and returns nil:
//
//   - Acquire calls waiting in their backoff return at once, with an error matching
//     ErrClientClosed (and the last attempt's error);
//   - every Lease not closed yet is closed, in parallel: its renewal stops, its context is
//     cancelled with cause ErrClientClosed, and its lock is released (each release bounded by
//     the node timeout; Lease.Close afterwards returns that release's result);
//   - the releases that nodes missed are no longer retried (those locks expire by their TTL);
//   - it waits for the node requests still running after their calls returned, each bounded
//     by the node timeout, and for its background requests, which it cancels: a subscription
//     still being confirmed (WakeOnRelease), and the opening of a connection, which go-redis may finish only at
//     its deadline (at most 4 node timeouts, see WithNodeTimeout).
//
// Calls after Close fail with ErrClientClosed. Close does not close the nodes' go-redis
// clients: they belong to the caller.
func (c *Client) Close() error {
	c.mu.Lock()
	c.ending = true
	leases := make([]*Lease, 0, len(c.leases))
	for le := range c.leases {
		leases = append(leases, le)
	}
	c.mu.Unlock()
	c.stopBG()
	var wg sync.WaitGroup
	for _, le := range leases {
		wg.Go(func() { _ = le.end(context.Background(), ErrClientClosed, 0) })
	}
	wg.Wait()
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.inflight.Wait()
	return nil
}

// addLease registers a new lease, for Close to end; it reports false once Close has begun.
func (c *Client) addLease(le *Lease) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ending {
		return false
	}
	if c.leases == nil {
		c.leases = make(map[*Lease]struct{})
	}
	c.leases[le] = struct{}{}
	return true
}

// dropLease forgets a closed lease.
func (c *Client) dropLease(le *Lease) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.leases, le)
}

// reply is one node's answer to one request.
type reply struct {
	node    int
	outcome outcome
	token   uint64
	count   uint64 // the acquisition counter's value (countAcquisitions)
	holder  *Holder
	refusal *refusal
	revoked bool // an extension refused because the lock was revoked there (revoke)
	value   any  // broadcast's reply
	err     error
}

// start registers a goroutine with the Client, so that Close waits for it. Once Close was
// called, only work that running goroutines start is registered (a late reply's release):
// Close waits for it too.
func (c *Client) start() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed && c.running == 0 {
		return false
	}
	c.running++
	c.inflight.Add(1)
	return true
}

// done unregisters a goroutine that start registered.
func (c *Client) done() {
	c.mu.Lock()
	c.running--
	c.mu.Unlock()
	c.inflight.Done()
}

func (c *Client) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// fan is one request to several nodes: the script call to send, and what to do with each
// node's reply. parse turns a node's reply into a reply, and late takes the replies that came
// after the caller decided (late may be nil); both run in the node's link goroutine, so they
// must not block (queuing more requests does not). A non-nil gaveUp, once set, stops the
// requests not sent yet: they are failed with errNotSent.
type fan struct {
	call     *call
	replicas []int // by node (nil: none), WithWaitForReplicas
	parse    func(node int, cmd *redis.Cmd) reply
	late     func(reply)
	gaveUp   *atomic.Bool

	ctx  context.Context // the caller's
	bctx batchCtx        // what the requests are sent with, until the deadline
	ch   chan int        // the index in ops of each reply, as it arrives
	ops  []op
	// few holds the ops of a fanout to at most len(few) nodes, in the fan's own allocation.
	few [5]op

	mu      sync.Mutex
	decided bool
}

// fanout queues f's call on each of the given nodes' links and passes the replies to decide,
// in arrival order, until decide returns true, every reply is in, or the deadline (timeout
// from now) or ctx ended; a node that has not answered by then counts as failed, and its
// reply, when it comes, goes to f.late. fanout returns the replies that arrived after the
// decision but before it returned. With a nil decide it returns at once, and every reply is
// late. A request still queued when its deadline passes is not sent.
func (c *Client) fanout(ctx context.Context, f *fan, nodes []int, timeout time.Duration, decide func(reply) bool) ([]reply, error) {
	// A fanout that nobody waits for is the Client's own follow-up (a late reply's release),
	// which Close lets finish.
	if decide != nil && c.isClosed() {
		return nil, ErrClientClosed
	}
	c.post(ctx, f, nodes, timeout, decide)
	if decide == nil {
		return nil, nil
	}
	cut := f.await(ctx, len(nodes), timeout, decide)
	return f.finish(cut, decide), nil
}

// post queues f's call on each of the given nodes' links, each request bounded by timeout.
func (c *Client) post(ctx context.Context, f *fan, nodes []int, timeout time.Duration, decide func(reply) bool) {
	f.ctx, f.decided = ctx, decide == nil
	f.bctx = batchCtx{values: ctx, at: time.Now().Add(timeout)}
	f.ch = make(chan int, len(nodes))
	if f.ops = f.few[:0]; len(nodes) > len(f.few) {
		f.ops = make([]op, 0, len(nodes))
	}
	f.ops = f.ops[:len(nodes)]
	// A caller that waits for one node sends its request itself when the node's link is idle.
	inline := len(nodes) == 1 && decide != nil
	for k, i := range nodes {
		f.ops[k] = op{f: f, node: i, index: k}
		if c.enqueue(&f.ops[k], inline) {
			c.sendInline(&c.links[i])
		}
	}
}

// await passes the n replies to decide as they arrive, until decide returns true or every
// reply is in, and returns nil; or the error that cut the wait short: timeout passed, or ctx
// ended.
func (f *fan) await(ctx context.Context, n int, timeout time.Duration, decide func(reply) bool) error {
	t := timers.Get().(*time.Timer)
	t.Reset(timeout)
	defer func() { t.Stop(); timers.Put(t) }()
	for range n {
		select {
		case k := <-f.ch:
			if decide(f.ops[k].reply) {
				return nil
			}
		case <-t.C:
			return fmt.Errorf("no reply within the node timeout %v: %w", timeout, context.DeadlineExceeded)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// finish ends the wait for f's replies: the replies that come from now on are late. It
// returns the replies that arrived meanwhile; or, when the wait was cut short (cut), passes
// them to decide, then the silent nodes as failed with cut, until decide returns true.
func (f *fan) finish(cut error, decide func(reply) bool) []reply {
	f.mu.Lock()
	f.decided = true
	var missing []int
	if cut != nil {
		for k := range f.ops {
			if !f.ops[k].delivered {
				missing = append(missing, f.ops[k].node)
			}
		}
	}
	f.mu.Unlock()
	var rest []reply
	for len(f.ch) > 0 {
		rest = append(rest, f.ops[<-f.ch].reply)
	}
	if cut == nil {
		return rest
	}
	// Decide with what came, then with the silent nodes as failed.
	for _, r := range rest {
		if decide(r) {
			return nil
		}
	}
	for _, i := range missing {
		if decide(reply{node: i, outcome: outcomeError, err: cut}) {
			break
		}
	}
	return nil
}

// timers holds stopped timers for fanouts to reuse.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// deliver hands o's reply to the caller, or to late once the caller decided.
func (f *fan) deliver(o *op) {
	r := f.parse(o.node, o.cmd)
	f.mu.Lock()
	o.delivered = true
	if !f.decided {
		o.reply = r
		f.ch <- o.index
		f.mu.Unlock()
		return
	}
	f.mu.Unlock()
	if f.late != nil {
		f.late(r)
	}
}

// abandoned reports whether the caller gave up the requests not sent yet.
func (f *fan) abandoned() bool { return f.gaveUp != nil && f.gaveUp.Load() }

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

// primaryGroup returns what a lock's primary node and contention are remembered by: the
// key's hash tag, so that the keys of one job (its ticks, its run key) share them, else the
// key.
func primaryGroup(key string) string {
	if tag, ok := hashslot.Tag(key); ok {
		return "{" + tag + "}"
	}
	return key
}

// ttlArg is a TTL in milliseconds as the scripts take it, boxed.
type ttlArg struct {
	ttl time.Duration
	arg any
}

// ttlArg returns ttl in milliseconds as the scripts' argument. The last one is kept: a
// Client's locks mostly share one TTL.
func (c *Client) ttlArg(ttl time.Duration) any {
	if p := c.lastTTL.Load(); p != nil && p.ttl == ttl {
		return p.arg
	}
	p := &ttlArg{ttl: ttl, arg: formatMillis(ttl)}
	c.lastTTL.Store(p)
	return p.arg
}

// nodeTimeout returns how long one request to one node may take for a lock of the given TTL:
// WithNodeTimeout's value, or by default TTL/50 and at least 5ms.
func (c *Client) nodeTimeout(ttl time.Duration) time.Duration {
	if c.cfg.nodeTimeout > 0 {
		return c.cfg.nodeTimeout
	}
	return max(ttl/50, 5*time.Millisecond)
}

// checkTTL reports whether the client accepts ttl for a lock, as a *ttlError or nil, without
// any I/O.
func (c *Client) checkTTL(ttl time.Duration) error {
	bad := func(format string, args ...any) error {
		return &ttlError{TTL: ttl, Problem: fmt.Sprintf(format, args...)}
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

// contentionWindow is how long a lock counts as contended after an acquisition saw it held:
// while it is, acquisitions ask the lock's primary node first and alone, and fan out to the
// other nodes only if it said yes, so that racers cost one request each and never split the
// vote. Uncontended locks are asked of every node in parallel.
const contentionWindow = 10 * time.Minute

// contention remembers which locks were recently seen held, by fence key.
type contention struct {
	mu    sync.Mutex
	seen  map[string]time.Time
	swept time.Time // last sweep of expired entries
}

func (ct *contention) mark(key string, now time.Time) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.seen == nil {
		ct.seen = make(map[string]time.Time)
	}
	ct.seen[key] = now
	if now.Sub(ct.swept) > contentionWindow {
		ct.swept = now
		for k, t := range ct.seen {
			if now.Sub(t) > contentionWindow {
				delete(ct.seen, k)
			}
		}
	}
}

func (ct *contention) is(key string, now time.Time) bool {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	t, ok := ct.seen[key]
	return ok && now.Sub(t) <= contentionWindow
}
