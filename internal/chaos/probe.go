package chaos

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// probeEvery is how often the stall probe pings each node.
const probeEvery = 100 * time.Millisecond

// A stallProbe pings every node straight (not through the workers' proxies) and keeps, as
// nodeStalled effects, the pings that failed or took longer than slow. It measures the fault
// no episode injects: the host itself stalling — two cores busy with other work, the harness
// (which carries the proxies) or a node descheduled — which the workers feel as slow nodes.
type stallProbe struct {
	slow    time.Duration
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	clients []*redis.Client

	mu      sync.Mutex
	effects []effect
}

// startStallProbe starts a goroutine per node; stop ends them.
func startStallProbe(addrs []string, slow time.Duration) *stallProbe {
	ctx, cancel := context.WithCancel(context.Background())
	p := &stallProbe{slow: slow, cancel: cancel}
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1, DialTimeout: time.Second,
			ReadTimeout: time.Second, WriteTimeout: time.Second})
		p.clients = append(p.clients, c)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.watch(ctx, i, c)
		}()
	}
	return p
}

func (p *stallProbe) watch(ctx context.Context, node int, c *redis.Client) {
	t := time.NewTicker(probeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := time.Now()
		err := c.Ping(ctx).Err()
		took := time.Since(start)
		if ctx.Err() != nil {
			return
		}
		if err != nil || took > p.slow {
			p.mu.Lock()
			p.effects = append(p.effects, effect{kind: nodeStalled, worker: -1, node: node, from: start, to: start.Add(took)})
			p.mu.Unlock()
		}
	}
}

// stop ends the probe and returns what it recorded.
func (p *stallProbe) stop() []effect {
	p.cancel()
	p.wg.Wait()
	for _, c := range p.clients {
		c.Close()
	}
	return p.effects
}
