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
// It runs its own three embedded Redis-protocol nodes (miniredis), and by default an in-memory
// store. With -postgres, the store is a PostgreSQL database checked by package
// fence/pgfence, the way a real job would write:
//
//	go run ./examples/fencing -postgres postgres://user@localhost/db
//
// It creates the fence table (pgfence.Schema) and a table ledger_sync in that database.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/pgfence"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// store is the storage the job writes to: it refuses a write whose token is lower than one
// it has seen, with an error matching fence.ErrStale.
type store interface {
	Write(ctx context.Context, token uint64, value string) error
	// Kept returns the value the store holds and its token.
	Kept(ctx context.Context) (string, uint64, error)
}

// Store is an in-memory store. It remembers the highest fencing token it has seen and refuses
// writes with a lower one. PostgresStore does the same in a database, and package
// fence/redisfence in Redis.
type Store struct {
	mu    sync.Mutex
	fence uint64
	value string
}

// Write stores value if token is not lower than every token seen before.
func (s *Store) Write(_ context.Context, token uint64, value string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.fence {
		return &fence.StaleError{Resource: "ledger-sync", Token: token, Stored: s.fence}
	}
	s.fence, s.value = token, value
	return nil
}

// Kept returns the value stored and its token.
func (s *Store) Kept(context.Context) (string, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.value, s.fence, nil
}

// PostgresStore keeps the value in the table ledger_sync, and its writes are checked by
// pgfence in the same transaction.
type PostgresStore struct {
	conn *pgx.Conn
}

// NewPostgresStore creates the fence table and ledger_sync if missing, on conn.
func NewPostgresStore(ctx context.Context, conn *pgx.Conn) (*PostgresStore, error) {
	for _, stmt := range []string{pgfence.Schema(),
		`CREATE TABLE IF NOT EXISTS ledger_sync (id int PRIMARY KEY, value text NOT NULL)`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return nil, err
		}
	}
	return &PostgresStore{conn: conn}, nil
}

// Write stores value under the fence of the resource "ledger-sync".
func (s *PostgresStore) Write(ctx context.Context, token uint64, value string) error {
	return pgfence.Write(ctx, s.conn, pgx.TxOptions{}, "ledger-sync", token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO ledger_sync VALUES (1, $1) ON CONFLICT (id) DO UPDATE SET value = $1`, value)
		return err
	})
}

// Kept returns the value stored and the resource's token.
func (s *PostgresStore) Kept(ctx context.Context) (string, uint64, error) {
	var value string
	var token int64
	err := s.conn.QueryRow(ctx, `SELECT value, (SELECT token FROM cronlock_fence WHERE resource = 'ledger-sync') FROM ledger_sync WHERE id = 1`).Scan(&value, &token)
	return value, uint64(token), err
}

func main() {
	dsn := flag.String("postgres", "", "a PostgreSQL connection string: write to that database, checked by fence/pgfence, instead of an in-memory store")
	flag.Parse()
	if err := run(os.Stdout, *dsn); err != nil {
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

func run(out io.Writer, dsn string) error {
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

	var store store = &Store{}
	if dsn != "" {
		conn, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			return err
		}
		closers = append(closers, func() { _ = conn.Close(context.Background()) })
		if store, err = NewPostgresStore(context.Background(), conn); err != nil {
			return err
		}
	}
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
			err := store.Write(context.WithoutCancel(ctx), r.FencingToken, "written by a")
			say("%s: write with token %d: %v", r.Replica, r.FencingToken, err)
			aDone <- err
			return err
		}
		err := store.Write(ctx, r.FencingToken, "written by b")
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
	// Wait until its lock expired on the nodes; b then takes the tick over. A tick's lock key
	// is {prefix:job}:tick:<unix ms> (package scheduler's doc).
	var tickKey string
	for _, e := range a.Entries() {
		tickKey = fmt.Sprintf("{%s:%s}:tick:%d", middleware.DefaultPrefix, e.Name, e.Prev.UnixMilli())
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
	value, token, err := store.Kept(context.Background())
	if err != nil {
		return err
	}
	say("the store kept %q (token %d); the stale write was refused: %v", value, token, errors.Is(werr, fence.ErrStale))
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
