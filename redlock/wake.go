package redlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscriber is a node that can subscribe to channels; *redis.Client and *redis.ClusterClient
// can.
type subscriber interface {
	Subscribe(ctx context.Context, channels ...string) *redis.PubSub
}

// waker turns the release notifications of a lock on every node into wake-ups.
type waker struct {
	subs  []*redis.PubSub
	wake  chan struct{}
	relay sync.WaitGroup
}

// subscribe listens for releases of req's key. One notification per release is enough, and
// a contended acquisition asks the primary node first, so it listens to the primary node
// alone; if that fails, to every other node that can, in parallel. It returns nil when no
// node could be subscribed to: the caller then waits on its backoff alone.
func (c *Client) subscribe(ctx context.Context, req *request) *waker {
	w := &waker{wake: make(chan struct{}, 1)}
	p := c.primary(req.group)
	channel, timeout := releasedChannel(req.keys[2]), c.nodeTimeout(req.ttl)
	if !c.listen(ctx, channel, timeout, w, []int{p}) {
		if !c.listen(ctx, channel, timeout, w, c.others(p)) {
			return nil
		}
	}
	w.start()
	return w
}

// start relays the messages of every subscription to w.wake.
func (w *waker) start() {
	for _, ps := range w.subs {
		msgs := ps.Channel()
		w.relay.Go(func() {
			for range msgs {
				select {
				case w.wake <- struct{}{}:
				default:
				}
			}
		})
	}
}

// listen subscribes w to channel on the given nodes, in parallel, each subscription bounded by
// timeout and by ctx's deadline, and reports whether any was confirmed. It returns when every
// node confirmed or failed, or as soon as ctx ends; a subscription confirmed after that is
// closed. The requests belong to the Client: Close cancels them and waits for them.
func (c *Client) listen(ctx context.Context, channel string, timeout time.Duration, w *waker, nodes []int) bool {
	var subs []subscriber
	for _, i := range nodes {
		if s, ok := c.nodes[i].(subscriber); ok && c.start() {
			subs = append(subs, s)
		}
	}
	if len(subs) == 0 {
		return false
	}
	var mu sync.Mutex
	pending, gaveUp, all := len(subs), false, make(chan struct{})
	for _, s := range subs {
		go func() {
			defer c.done()
			sctx, cancel := context.WithTimeout(ctx, timeout)
			unhook := context.AfterFunc(c.bg, cancel) // Close ends it too
			ps := s.Subscribe(sctx, channel)
			_, err := ps.Receive(sctx) // the subscription's confirmation
			unhook()
			cancel()
			mu.Lock()
			keep := err == nil && !gaveUp
			if keep {
				w.subs = append(w.subs, ps)
			}
			if pending--; pending == 0 {
				close(all)
			}
			mu.Unlock()
			if !keep {
				_ = ps.Close()
			}
		}()
	}
	select {
	case <-all:
	case <-ctx.Done():
	}
	mu.Lock()
	defer mu.Unlock()
	gaveUp = true
	return len(w.subs) > 0
}

// C returns a channel that receives a value after a release; nil (never ready) for a nil
// waker.
func (w *waker) C() <-chan struct{} {
	if w == nil {
		return nil
	}
	return w.wake
}

// close ends every subscription and waits for the goroutines that relayed them.
func (w *waker) close() {
	if w == nil {
		return
	}
	for _, ps := range w.subs {
		_ = ps.Close()
	}
	w.relay.Wait()
}

// notifications is a subscription to one Pub/Sub channel on every node that could be
// subscribed to (see subscribeChannel).
type notifications struct{ w *waker }

// subscribeChannel listens on channel on every node that can subscribe (go-redis clients can), for
// messages published there — e.g. by a script run with broadcast — as hints that shared state
// changed. Messages are coalesced: C tells that at least one came since the last receive, not
// how many, and a message may be lost (a node down, a reconnection), so a caller must also
// look on its own now and then. It returns nil when no node could be subscribed to; the
// methods of a nil *notifications are no-ops.
//
// subscribeChannel returns once every node confirmed or failed, each within max(NodeTimeout(MaxTTL),
// 1s), or as soon as ctx ends, with the subscriptions confirmed by then (nil if none). ctx
// bounds the subscribing only: the subscriptions last until Close. A request still waiting
// for a node when subscribeChannel returns belongs to the Client, which ends it with the bound above,
// ctx's deadline or the Client's Close.
func (c *Client) subscribeChannel(ctx context.Context, channel string) *notifications {
	w := &waker{wake: make(chan struct{}, 1)}
	if !c.listen(ctx, channel, max(c.nodeTimeout(c.cfg.maxTTL), time.Second), w, c.all()) {
		return nil
	}
	w.start()
	return &notifications{w: w}
}

// C returns a channel that receives a value after a message; nil (never ready) for a nil
// *notifications.
func (n *notifications) C() <-chan struct{} {
	if n == nil {
		return nil
	}
	return n.w.C()
}

// Close ends the subscriptions and waits for the goroutines that relayed them.
func (n *notifications) Close() {
	if n != nil {
		n.w.close()
	}
}
