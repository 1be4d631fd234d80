package redlock

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// missedRelease is a release that did not reach its node (the request failed or timed out),
// retried in the background until the lock has expired there.
type missedRelease struct {
	release *call
	until   time.Time // the lock has expired on the node by then
	group   string    // the lock's primaryGroup, when the node is its primary
}

// nodeRetries is the background work of one node, done by one goroutine while there is some:
// the releases the node missed, and a connection to open after a request failed.
//
// A failed request costs go-redis its connection, and the next request on a new connection
// sends HELLO (and CLIENT SETINFO) within that request's deadline: on a link slower than a
// third of the node timeout every request would then fail. So for each failed request (up to
// maxConnects at once) the goroutine asks the node something harmless, in parallel, with the
// node's dial timeout as deadline (handshake): the connections they open wait in the pool for
// the next requests.
type nodeRetries struct {
	mu      sync.Mutex
	pending []missedRelease
	connect int // requests that failed since the last connections were opened
	running bool
}

// maxConnects bounds the connections a node's goroutine opens at once.
const maxConnects = 8

// Bounds of the wait between two rounds of retries of a node's missed releases.
const (
	firstRetryWait = 10 * time.Millisecond
	maxRetryWait   = time.Second
)

// releaseFan returns a fan that releases one hold of a lock (k) on each node it is sent to.
// When a node's request fails for any reason but a reply of the node, the release is retried
// in the background until the lock has expired there: a release acts once however often it
// arrives (a nested hold's removes its own id). A non-empty group is the lock's group, whose
// unreleased count the caller raised because primary is among the nodes: it is lowered once
// the release arrived there or was given up.
func (c *Client) releaseFan(k *call, ttl time.Duration, primary int, group string) *fan {
	return &fan{call: k, parse: func(node int, cmd *redis.Cmd) reply {
		g := ""
		if node == primary {
			g = group
		}
		n, err := cmd.Int64()
		if err == nil || isNodeReply(err) {
			if g != "" {
				c.unreleased.add(g, -1)
			}
		} else {
			c.retry(node, missedRelease{release: k, until: time.Now().Add(ttl), group: g})
		}
		return judge(node, n, err)
	}}
}

// failed records that a request to node failed without a reply of the node, so that the
// node's goroutine opens a connection with the handshake deadline.
func (c *Client) failed(node int) {
	c.background(node, func(r *nodeRetries) { r.connect = min(r.connect+1, maxConnects) })
}

// isNodeReply reports whether err is an error reply of the node (a script error), which
// retrying cannot change, rather than a failure to get a reply.
func isNodeReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

// retry records a missed release of node (failed, which asked for a connection too).
func (c *Client) retry(node int, m missedRelease) {
	c.background(node, func(r *nodeRetries) { r.pending = append(r.pending, m) })
}

// background records work for node's goroutine with add, and starts the goroutine if it is
// not running.
func (c *Client) background(node int, add func(*nodeRetries)) {
	r := &c.retries[node]
	r.mu.Lock()
	add(r)
	start := !r.running
	r.running = true
	r.mu.Unlock()
	if !start {
		return
	}
	if !c.start() {
		r.mu.Lock()
		r.running, r.connect = false, 0
		r.drop(c, r.pending)
		r.pending = nil
		r.mu.Unlock()
		return
	}
	go c.retryReleases(node)
}

// handshakeTimeouts is how many of the longest node timeouts a background request may take:
// a new connection's dial, HELLO and CLIENT SETINFO, then the request, each a round trip that
// must fit in a node timeout for the node to be of any use.
const handshakeTimeouts = 4

// handshake returns how long the background work may wait for node: its go-redis dial
// timeout, but at most handshakeTimeouts of the longest node timeout and at least one. It
// bounds Close too: go-redis does not interrupt a read (a new connection's HELLO) when the
// request's context is cancelled, only when its deadline passes.
func (c *Client) handshake(node int) time.Duration {
	d := 5 * time.Second // go-redis's default DialTimeout
	if rc, ok := c.nodes[node].(*redis.Client); ok && rc.Options().DialTimeout > 0 {
		d = rc.Options().DialTimeout
	}
	nt := c.nodeTimeout(c.cfg.maxTTL)
	return max(min(d, handshakeTimeouts*nt), nt)
}

// drop forgets missed releases: each lock expires on the node by its TTL.
func (r *nodeRetries) drop(c *Client, ms []missedRelease) {
	for _, m := range ms {
		if m.group != "" {
			c.unreleased.add(m.group, -1)
		}
	}
}

// retryReleases does node's background work — first a connection if asked, then the missed
// releases in the order they were missed, each with the handshake deadline — with a wait
// doubling from firstRetryWait to maxRetryWait while the node fails, until none is left or
// the Client is closed. Releases whose lock has expired are dropped.
func (c *Client) retryReleases(node int) {
	defer c.done()
	r := &c.retries[node]
	wait := firstRetryWait
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-c.bg.Done():
			r.mu.Lock()
			r.drop(c, r.pending)
			r.pending, r.running, r.connect = nil, false, 0
			r.mu.Unlock()
			return
		case <-t.C:
		}
		r.mu.Lock()
		batch, connect := r.pending, r.connect
		r.pending, r.connect = nil, 0
		r.mu.Unlock()
		failed := !c.connect(node, connect)
		var left []missedRelease
		for i, m := range batch {
			if !time.Now().Before(m.until) {
				r.drop(c, batch[i:i+1])
				continue
			}
			if failed {
				left = append(left, m)
				continue
			}
			ctx, cancel := context.WithTimeout(c.bg, c.handshake(node))
			err := m.release.run(ctx, c.nodes[node]).Err()
			cancel()
			if err != nil && !isNodeReply(err) {
				failed = true // the node is still unreachable: the others wait for the next round
				left = append(left, m)
				continue
			}
			r.drop(c, batch[i:i+1])
		}
		r.mu.Lock()
		r.pending = append(left, r.pending...)
		if len(r.pending) == 0 && r.connect == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		if failed {
			wait = min(2*wait, maxRetryWait)
		} else {
			wait = firstRetryWait
		}
		t.Reset(wait)
	}
}

// connect makes n requests to node in parallel, each with the handshake deadline, so that
// go-redis opens up to n connections (fewer when some are idle), and reports whether they all
// succeeded.
func (c *Client) connect(node, n int) bool {
	var wg sync.WaitGroup
	var failed atomic.Bool
	for range n {
		wg.Go(func() {
			// Any command opens a connection; this one reads nothing and changes nothing.
			ctx, cancel := context.WithTimeout(c.bg, c.handshake(node))
			defer cancel()
			if err := c.nodes[node].ScriptExists(ctx, releaseScript.Hash()).Err(); err != nil && !isNodeReply(err) {
				failed.Store(true)
			}
		})
	}
	wg.Wait()
	return !failed.Load()
}

// pendingReleases counts, by primary group, the releases to the group's primary node that
// are not known to have arrived. While a group has some, its contended acquisitions ask every
// node in parallel instead of the primary first: the primary, still holding a lock that this
// Client released, would refuse them for good. (A late yes of the primary to an acquisition
// that was decided without it leaves the same until its reply is in and released; that
// window is not covered: marking every parallel request to the primary would keep the
// contended acquisitions that follow a refusal off primary-first.)
type pendingReleases struct {
	mu sync.Mutex
	n  map[string]int
}

func (p *pendingReleases) add(group string, d int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n == nil {
		p.n = make(map[string]int)
	}
	if p.n[group] += d; p.n[group] <= 0 {
		delete(p.n, group)
	}
}

func (p *pendingReleases) has(group string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n[group] > 0
}
