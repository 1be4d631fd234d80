// Command fencing shows why jobs should pass their fencing token (job.Run.FencingToken) to the
// storage they write, and how a store rejects stale tokens.
//
// A lock alone cannot stop a holder that was paused (a GC pause, SIGSTOP, a slow disk) past
// its lease: when it resumes it believes it still holds the lock, and writes. Here:
//
//  1. replica-a runs the tick, is cut off from the lock nodes (a network partition, made by
//     closing its connections and refusing new ones) and "pauses" without looking at its
//     context;
//
//  2. its lease is lost, the lock expires, and replica-b takes the tick over, with a larger
//     token, and writes;
//
//  3. replica-a wakes up and writes with its old token: the store refuses it.
//
//     go run ./examples/fencing
//
// It runs its own three embedded Redis-protocol nodes (miniredis).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// ErrStaleToken is returned by Store.Write for a token lower than one it has seen.
var ErrStaleToken = errors.New("store: stale fencing token")

// Store is the storage a job writes to. It remembers the highest fencing token it has seen and
// refuses writes with a lower one. In SQL the same check is one conditional statement:
//
//	UPDATE balances SET amount = $1, fence = $2 WHERE account = $3 AND fence <= $2
//
// (zero rows updated means a stale writer); in Redis, a script that compares before it sets.
type Store struct {
	mu    sync.Mutex
	fence uint64
	value string
}

// Write stores value if token is not lower than every token seen before.
func (s *Store) Write(token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fence {
		return fmt.Errorf("%w: %d < %d", ErrStaleToken, token, s.fence)
	}
	s.fence, s.value = token, value
	return nil
}

func main() {
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	start := time.Now()
	var outMu sync.Mutex // jobs print from their own goroutines
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(out, "%5.2fs  %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	var closers []func()
	defer func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}()
	// Three lock nodes; replica-a's connections to them can be cut.
	var servers []*miniredis.Miniredis
	for range 3 {
		m := miniredis.NewMiniRedis()
		if err := m.Start(); err != nil {
			return err
		}
		m.ClockTTL(true) // keys expire on the real clock
		closers = append(closers, m.Close)
		servers = append(servers, m)
	}
	cut := &partition{}
	lockClient := func(dial func(ctx context.Context, network, addr string) (net.Conn, error)) (*redlock.Client, error) {
		var nodes []redlock.Node
		for _, s := range servers {
			rc := redis.NewClient(&redis.Options{Addr: s.Addr(), Dialer: dial, ContextTimeoutEnabled: true, MaxRetries: -1})
			closers = append(closers, func() { _ = rc.Close() })
			nodes = append(nodes, rc)
		}
		c, err := redlock.New(nodes, redlock.WithNodeTimeout(50*time.Millisecond))
		if err != nil {
			return nil, err
		}
		closers = append(closers, func() { _ = c.Close() })
		return c, c.EndQuarantine(context.Background()) // new nodes
	}

	store := &Store{}
	paused := make(chan struct{})
	bDone := make(chan struct{})
	aDone := make(chan error, 1)
	syncLedger := func(ctx context.Context) error {
		r, _ := job.RunFrom(ctx)
		say("%s: runs tick %s with token %d", r.Replica, r.Tick.Format(time.TimeOnly), r.FencingToken)
		if r.Replica == "replica-a" {
			close(paused)
			<-bDone // a long pause that ignores ctx, as a GC pause or SIGSTOP would
			say("%s: wakes up; its context says: %v", r.Replica, context.Cause(ctx))
			err := store.Write(r.FencingToken, "written by a")
			say("%s: write with token %d: %v", r.Replica, r.FencingToken, err)
			aDone <- err
			return err
		}
		err := store.Write(r.FencingToken, "written by b")
		say("%s: write with token %d: %v", r.Replica, r.FencingToken, err)
		return err
	}
	// CatchUp lets each replica take the newest tick when it starts, so that b, started
	// late, goes for the tick a has. Retries counts a tick's runs across the cluster, and a
	// run that lost its lease is one of them: b's takeover is the tick's second run.
	ledgerSync := job.Job{Name: "ledger-sync", Spec: "@every 1h", Handler: syncLedger,
		Options: job.Options{LockTTL: time.Second, CatchUp: time.Hour, Retries: 1}}

	locksA, err := lockClient(cut.dial)
	if err != nil {
		return err
	}
	a, err := scheduler.New(locksA, scheduler.WithReplica("replica-a"))
	if err != nil {
		return err
	}
	if err := a.Add(ledgerSync); err != nil {
		return err
	}
	if err := a.Start(); err != nil {
		return err
	}
	<-paused
	say("replica-a is cut off from the lock nodes")
	cut.set(true)
	// Wait until its lock expired on the nodes; b then takes the tick over.
	var tickKey string
	for _, e := range a.Entries() {
		tickKey = middleware.TickKey(middleware.DefaultPrefix, e.Name, e.Prev)
	}
	for expired := false; !expired; {
		time.Sleep(20 * time.Millisecond)
		expired = true
		for _, s := range servers {
			if s.Exists(tickKey) {
				expired = false
			}
		}
	}
	say("replica-a's lock expired on the nodes")
	locksB, err := lockClient(nil) // go-redis's own dialer: b is not cut off
	if err != nil {
		return err
	}
	b, err := scheduler.New(locksB, scheduler.WithReplica("replica-b"),
		scheduler.WithMiddleware(func(next job.Handler) job.Handler {
			return func(ctx context.Context) error {
				err := next(ctx)
				close(bDone)
				return err
			}
		}))
	if err != nil {
		return err
	}
	if err := b.Add(ledgerSync); err != nil {
		return err
	}
	if err := b.Start(); err != nil {
		return err
	}
	werr := <-aDone
	say("the store kept %q (token %d); the stale write was refused: %v", store.value, store.fence, errors.Is(werr, ErrStaleToken))
	cut.set(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(a.Stop(ctx), b.Stop(ctx))
}

// partition cuts a client off from its Redis nodes: set(true) closes its connections, and dial
// refuses new ones until set(false). It is a go-redis Dialer.
type partition struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

func (p *partition) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return nil, errors.New("partitioned (example)")
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err == nil {
		p.conns = append(p.conns, c)
	}
	return c, err
}

func (p *partition) set(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = cut
	if cut {
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.conns = nil
	}
}
