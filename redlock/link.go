package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// link is the Client's way to one node. Every request to the node is queued on its link, and
// up to maxBatches senders send what is queued: each takes the whole queue and sends it as
// one pipeline — one round trip and one connection from the node's pool however many requests
// arrived meanwhile — hands each reply to its fanout, and takes the next batch. A slow node
// thus holds at most maxBatches connections and goroutines, however many requests wait for
// it, and concurrent requests share round trips.
//
// A sender goroutine whose queue is empty gives up its place and waits up to linger for more
// before it exits, so that a busy Client reuses its senders — and their stacks, grown through
// go-redis's deep call path — instead of starting one per request.
type link struct {
	node Node
	wake chan struct{} // a place handed to an idle sender; capacity maxBatches

	mu      sync.Mutex
	queue   []*op
	spare   [][]*op // emptied batches, for the next queues
	senders int     // places taken: goroutines and callers sending, at most maxBatches
	idle    int     // sender goroutines waiting for work that no place was handed to yet
}

// maxBatches bounds the batches in flight to one node: enough that a request rarely waits for
// a whole round trip of others before it is sent, few enough that a slow node cannot take many
// connections.
const maxBatches = 4

// linger is how long an idle sender goroutine waits for more requests before it exits: long
// enough to span the gaps between the requests of a busy client, short enough that an idle
// Client soon runs no goroutine. A Client's is config.linger; tests set their own.
const linger = 50 * time.Millisecond

// op is one request of a fanout to one node.
type op struct {
	f         *fan
	node      int
	index     int // in f.ops
	cmd       *redis.Cmd
	reply     reply // parsed, for the fanout's caller
	delivered bool  // parsed and handed on (guarded by f.mu)
}

// errNotSent is the error of a request that its fanout gave up before it was sent.
var errNotSent = errors.New("redlock: request not sent: its call was decided without it")

// enqueue queues o on its node's link and, when fewer than maxBatches senders have a place,
// takes one: with inline, for the caller, and reports whether the caller must send
// (sendInline); else it hands it to an idle sender goroutine, or starts one.
func (c *Client) enqueue(o *op, inline bool) bool {
	l := &c.links[o.node]
	l.mu.Lock()
	l.queue = append(l.queue, o)
	start := l.senders < maxBatches
	if start {
		l.senders++
	}
	l.mu.Unlock()
	if !start || inline {
		return start
	}
	c.handOff(l)
	return false
}

// handOff gives the place the caller took on l to an idle sender goroutine, or to a new one.
func (c *Client) handOff(l *link) {
	l.mu.Lock()
	idle := l.idle > 0
	if idle {
		l.idle--
		l.wake <- struct{}{} // never blocks: each token has a waiting sender
	}
	l.mu.Unlock()
	if idle {
		return
	}
	if !c.start() {
		c.drain(l, ErrClientClosed)
		return
	}
	go c.send(l)
}

// drain fails every queued request with err, for a sender that could not start.
func (c *Client) drain(l *link, err error) {
	l.mu.Lock()
	batch := l.queue
	l.queue = nil
	l.senders--
	l.mu.Unlock()
	for _, o := range batch {
		o.fail(err)
	}
}

// send sends l's queue, batch after batch, until it stays empty for linger or the Client is
// closed.
func (c *Client) send(l *link) {
	defer c.done()
	var idle *time.Timer // made at the first wait, reused for the next
	defer func() {
		if idle != nil {
			idle.Stop()
		}
	}()
	for c.next(l, &idle) {
		batch := l.take()
		if batch == nil {
			continue // another sender took the queue
		}
		c.exec(l, batch)
		l.put(batch)
	}
}

// next reports whether the sender, which has a place on l, has work: at once when requests
// are queued; otherwise it gives up its place, waits for one to be handed back (with more
// requests) for up to linger, and returns false — to exit — when none was, or at once when
// the Client is closed.
func (c *Client) next(l *link, idle **time.Timer) bool {
	l.mu.Lock()
	if len(l.queue) > 0 {
		l.mu.Unlock()
		return true
	}
	l.senders--
	if c.bg.Err() != nil {
		l.mu.Unlock()
		return false
	}
	l.idle++
	l.mu.Unlock()
	if *idle == nil {
		*idle = time.NewTimer(c.cfg.linger)
	} else {
		(*idle).Reset(c.cfg.linger)
	}
	select {
	case <-l.wake:
		(*idle).Stop()
		return true
	case <-(*idle).C:
	case <-c.bg.Done():
		(*idle).Stop()
	}
	l.mu.Lock()
	gone := l.idle > 0
	if gone {
		l.idle--
	}
	l.mu.Unlock()
	if gone {
		return false
	}
	// A place was handed to an idle sender as this one stopped waiting, and every token
	// has a waiting sender: this one's is in the channel.
	<-l.wake
	return true
}

// sendInline sends one batch of l's queue in the caller's goroutine — a caller that waits for
// this one node anyway is spared a goroutine and two hand-offs — and hands what was queued
// meanwhile, with its place, to a sender goroutine.
func (c *Client) sendInline(l *link) {
	if batch := l.take(); batch != nil {
		c.exec(l, batch)
		l.put(batch)
	}
	l.mu.Lock()
	more := len(l.queue) > 0
	if !more {
		l.senders--
	}
	l.mu.Unlock()
	if more {
		c.handOff(l)
	}
}

// take returns the queue as the next batch, or nil when it is empty.
func (l *link) take() []*op {
	l.mu.Lock()
	defer l.mu.Unlock()
	batch := l.queue
	if len(batch) == 0 {
		return nil
	}
	l.queue = nil
	if n := len(l.spare); n > 0 {
		l.queue, l.spare = l.spare[n-1], l.spare[:n-1]
	}
	return batch
}

// put keeps a sent batch's slice for a next queue.
func (l *link) put(batch []*op) {
	clear(batch)
	l.mu.Lock()
	l.spare = append(l.spare, batch[:0])
	l.mu.Unlock()
}

// exec sends one batch and delivers its replies. Requests whose fanout gave them up, or whose
// deadline passed while they waited, are failed without being sent. The batch's deadline is
// the latest of its requests'; a fanout stops waiting for its own at its deadline.
func (c *Client) exec(l *link, batch []*op) {
	s := sendable(batch, time.Now())
	if len(s.live) == 0 {
		return
	}
	p, ok := l.node.(pipeNode)
	if !ok {
		execEach(l.node, s.ctx, s.live)
		return
	}
	var wait *redis.Cmd
	var waited time.Duration
	if len(s.live) == 1 && s.replicas == 0 {
		s.live[0].cmd = redis.NewCmd(s.ctx, s.live[0].f.call.cmd...)
		_ = p.Process(s.ctx, s.live[0].cmd) // the command keeps its error
	} else {
		wait, waited = pipeline(s.ctx, p, s.live, false, s.replicas, s.waitBy)
	}
	if retry := noScripts(s.ctx, p, s.live); len(retry) > 0 {
		// The node does not have some scripts cached (it restarted, or was flushed): send
		// those requests again as EVAL, with the source, in one more round trip.
		wait, waited = pipeline(s.ctx, p, retry, true, s.replicas, s.waitBy)
	}
	failed := false
	for _, o := range s.live {
		if err := o.cmd.Err(); err != nil && !isNodeReply(err) && !errors.Is(err, redis.Nil) {
			failed = true
		}
		if o.f.replicasOf(o.node) > 0 && o.cmd.Err() == nil {
			notReplicated(o, wait, waited)
		}
		o.f.deliver(o)
	}
	if failed {
		c.failed(s.live[0].node)
	}
}

// sendBatch is what of a batch is sent: the requests still live, and the deadline and WAIT
// they are sent with.
type sendBatch struct {
	live     []*op
	ctx      *batchCtx // the latest deadline's
	replicas int       // the most replicas a request waits for (WithWaitForReplicas)
	waitBy   time.Time // the earliest deadline of the requests that wait for replicas
}

// sendable fails, at now, the requests of batch that must not be sent, and returns the others.
func sendable(batch []*op, now time.Time) sendBatch {
	s := sendBatch{live: batch[:0]}
	for _, o := range batch {
		f := o.f
		switch {
		case f.abandoned():
			o.fail(errNotSent)
		case f.ctx.Err() != nil:
			o.fail(f.ctx.Err())
		case !now.Before(f.bctx.at):
			o.fail(fmt.Errorf("waited for the node longer than the node timeout: %w", context.DeadlineExceeded))
		default:
			s.live = append(s.live, o)
			if s.ctx == nil || f.bctx.at.After(s.ctx.at) {
				s.ctx = &f.bctx
			}
			if n := f.replicasOf(o.node); n > 0 {
				s.replicas = max(s.replicas, n)
				if s.waitBy.IsZero() || f.bctx.at.Before(s.waitBy) {
					s.waitBy = f.bctx.at
				}
			}
		}
	}
	return s
}

// execEach sends the requests to a node that does not pipeline: one after the other, each on
// its own.
func execEach(node Node, ctx *batchCtx, live []*op) {
	for _, o := range live {
		if o.f.replicasOf(o.node) > 0 {
			o.fail(fmt.Errorf("redlock: WithWaitForReplicas needs a node that pipelines (a go-redis client), not %T", node))
			continue
		}
		k := o.f.call
		o.cmd = k.s.Run(ctx, node, k.keys, k.argv()...)
		o.f.deliver(o)
	}
}

// pipeline sends the ops' scripts as one pipeline on p — as EVAL with eval, else EVALSHA —
// then, with replicas > 0, WAIT for that many of the node's replicas, and returns the WAIT
// command and its timeout.
func pipeline(ctx context.Context, p pipeNode, ops []*op, eval bool, replicas int, waitBy time.Time) (*redis.Cmd, time.Duration) {
	pipe := p.Pipeline()
	for _, o := range ops {
		if eval {
			o.cmd = pipe.Do(ctx, o.f.call.eval()...)
		} else {
			o.cmd = pipe.Do(ctx, o.f.call.cmd...)
		}
	}
	var wait *redis.Cmd
	var timeout time.Duration
	if replicas > 0 {
		// WAIT answers as soon as enough replicas acknowledged every write of this connection
		// so far, or when its timeout passed — which Redis notices on its server cron, up to
		// 1/hz (100ms by default) late: give it half of what is left of the earliest deadline.
		timeout = max(time.Until(waitBy)/2, time.Millisecond)
		wait = pipe.Do(ctx, "wait", replicas, timeout.Milliseconds())
	}
	_, _ = pipe.Exec(ctx) // each command keeps its own error
	return wait, timeout
}

// noScripts returns the ops whose node did not have their script cached, to be sent again as
// EVAL. The scripts whose source the Client does not have (broadcast's) are run again at once
// instead, through go-redis, which knows it.
func noScripts(ctx context.Context, p pipeNode, ops []*op) []*op {
	var retry []*op
	for _, o := range ops {
		if !noScript(o.cmd) {
			continue
		}
		if k := o.f.call; k.s.src == "" {
			o.cmd = k.s.Run(ctx, p, k.keys, k.argv()...)
			continue
		}
		retry = append(retry, o)
	}
	return retry
}

// notReplicated fails o's command with ErrNotReplicated unless WAIT counted enough of the
// node's replicas.
func notReplicated(o *op, wait *redis.Cmd, timeout time.Duration) {
	switch acks, err := wait.Int64(); {
	case err != nil:
		o.cmd.SetErr(fmt.Errorf("%w: WAIT: %w", ErrNotReplicated, err))
	case acks < int64(o.f.replicasOf(o.node)):
		o.cmd.SetErr(fmt.Errorf("%w: %d of %d replicas acknowledged within %v", ErrNotReplicated, acks, o.f.replicasOf(o.node), timeout))
	}
}

// replicasOf is how many of node's replicas must acknowledge f's request (0: do not wait).
func (f *fan) replicasOf(node int) int {
	if f.replicas == nil {
		return 0
	}
	return f.replicas[node]
}

// pipeNode is a node that pipelines: go-redis's clients are.
type pipeNode interface {
	redis.Scripter
	Pipeline() redis.Pipeliner
	Process(ctx context.Context, cmd redis.Cmder) error
}

// batchCtx is the context a batch is sent with, kept in its fan: go-redis takes the
// connection's deadline — dial, handshake, write and read — from Deadline
// (ContextTimeoutEnabled), so a batch needs no timer of its own. It is never cancelled: a
// request is bounded by its deadline, and the releases that Close waits for must still go out.
// Its values are the caller's, for go-redis hooks such as tracing.
type batchCtx struct {
	values context.Context
	at     time.Time
}

func (b *batchCtx) Deadline() (time.Time, bool) { return b.at, true }
func (b *batchCtx) Done() <-chan struct{}       { return nil }
func (b *batchCtx) Err() error                  { return nil }
func (b *batchCtx) Value(key any) any           { return b.values.Value(key) }

// fail delivers err as o's reply.
func (o *op) fail(err error) {
	o.cmd = redis.NewCmd(context.Background())
	o.cmd.SetErr(err)
	o.f.deliver(o)
}
