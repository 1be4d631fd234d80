package redlock

import (
	"context"
	"sync"

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
	if !c.listen(ctx, req, w, []int{p}) {
		if !c.listen(ctx, req, w, c.others(p)) {
			return nil
		}
	}
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
	return w
}

// listen subscribes w to the release channel of req's key on the given nodes, in parallel,
// and reports whether any subscription was confirmed.
func (c *Client) listen(ctx context.Context, req *request, w *waker, nodes []int) bool {
	channel := releasedChannel(req.keys[2])
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, i := range nodes {
		s, ok := c.nodes[i].(subscriber)
		if !ok {
			continue
		}
		wg.Go(func() {
			ps := s.Subscribe(ctx, channel)
			rctx, cancel := context.WithTimeout(ctx, c.nodeTimeout(req.ttl))
			_, err := ps.Receive(rctx) // the subscription's confirmation
			cancel()
			if err != nil {
				_ = ps.Close()
				return
			}
			mu.Lock()
			w.subs = append(w.subs, ps)
			mu.Unlock()
		})
	}
	wg.Wait()
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
