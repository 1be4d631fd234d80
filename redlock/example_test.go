package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

// localNodes starts n throwaway redis-server processes for an example and returns them as
// nodes, with a func that stops them.
func localNodes(n int) ([]redlock.Node, func()) {
	servers, err := redistest.NewN(n, redistest.Config{})
	if err != nil {
		panic(err)
	}
	var nodes []redlock.Node
	var stops []func()
	for _, s := range servers {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
		nodes = append(nodes, rc)
		stops = append(stops, func() { rc.Close(); s.Close() })
	}
	return nodes, func() {
		for _, stop := range stops {
			stop()
		}
	}
}

// newNodesAndClient starts 3 throwaway nodes and a client over them, out of quarantine (the
// nodes are new: nothing can have been forgotten), and returns a func that closes both.
func newNodesAndClient(opts ...redlock.Option) ([]redlock.Node, *redlock.Client, func()) {
	nodes, stop := localNodes(3)
	client, err := redlock.New(nodes, opts...)
	if err != nil {
		panic(err)
	}
	_ = client.EndQuarantine(context.Background())
	return nodes, client, func() {
		_ = client.Close()
		stop()
	}
}

func Example() {
	nodes, stop := localNodes(3)
	defer stop()
	client, err := redlock.New(nodes, redlock.WithLabel("worker-1"))
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	_ = client.EndQuarantine(ctx) // new nodes: nothing can have been forgotten

	l, err := client.Acquire(ctx, "report:daily", 10*time.Second)
	if err != nil {
		panic(err)
	}
	// Another holder is refused, and told who holds the lock.
	_, err = client.TryAcquire(ctx, "report:daily", 10*time.Second, redlock.Label("worker-2"))
	var ae *redlock.AcquireError
	if errors.As(err, &ae) && errors.Is(err, redlock.ErrNotAcquired) {
		fmt.Println("worker-2 refused; holder:", ae.Holder.Label)
	}
	if err := l.Release(ctx); err != nil {
		panic(err)
	}
	fmt.Println("released")
	// Output:
	// worker-2 refused; holder: worker-1
	// released
}

// A lease renews the lock while the work runs, and cancels the work's context before the lock
// can expire. Here a MaxHold of 300ms ends it.
func ExampleLock_Lease() {
	nodes, stop := localNodes(3)
	defer stop()
	client, _ := redlock.New(nodes)
	defer client.Close()
	ctx := context.Background()
	_ = client.EndQuarantine(ctx)

	l, err := client.Acquire(ctx, "long-job", time.Second)
	if err != nil {
		panic(err)
	}
	lease, err := l.Lease(ctx, redlock.MaxHold(300*time.Millisecond))
	if err != nil {
		panic(err)
	}
	defer lease.Close(context.Background())

	work := lease.Context()
	<-work.Done() // a real job would do its work here, checking work.Err()
	fmt.Println(errors.Is(context.Cause(work), redlock.ErrLeaseLost))
	fmt.Println(context.Cause(work))
	// Output:
	// true
	// redlock: lease lost: max hold 300ms reached
}

// fencedStore is storage that refuses writes from a holder older than one it has seen.
type fencedStore struct {
	mu     sync.Mutex
	latest uint64
	value  string
}

func (s *fencedStore) Write(token uint64, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if token < s.latest {
		return fmt.Errorf("stale token %d: %d has written since", token, s.latest)
	}
	s.latest, s.value = token, v
	return nil
}

// Fencing tokens stop a holder that lost its lock without knowing it (it was paused, say):
// the storage refuses its write because a newer holder has written.
func Example_fencing() {
	nodes, stop := localNodes(3)
	defer stop()
	client, _ := redlock.New(nodes, redlock.WithNodeTimeout(50*time.Millisecond))
	defer client.Close()
	ctx := context.Background()
	_ = client.EndQuarantine(ctx)
	store := &fencedStore{}

	first, _ := client.Acquire(ctx, "ledger", 200*time.Millisecond)
	// ... the first holder pauses past its TTL; the lock expires; a second one takes it.
	second, _ := client.Acquire(ctx, "ledger", 10*time.Second)
	fmt.Println("second:", store.Write(second.Token(), "b"))
	fmt.Println("first:", store.Write(first.Token(), "a") != nil)
	fmt.Println("value:", store.value)
	_ = second.Release(ctx)
	// Output:
	// second: <nil>
	// first: true
	// value: b
}

// chargeOrder locks the order itself: called on its own it takes the lock; called from work
// that already holds the order's lock (through a lease's context), it nests instead of
// waiting for itself. It returns the fencing token it charged with.
func chargeOrder(ctx context.Context, client *redlock.Client, orderID string) (uint64, error) {
	l, err := client.Acquire(ctx, "order:"+orderID, 10*time.Second)
	if err != nil {
		return 0, err
	}
	defer l.Release(context.WithoutCancel(ctx))
	return l.Token(), nil // a nested hold shares the outer lock's token
}

// Holds are reentrant by context: a job that holds an order's lock calls a helper that locks
// the same order, and the helper's hold nests inside the job's.
func ExampleWithHold() {
	nodes, stop := localNodes(3)
	defer stop()
	client, _ := redlock.New(nodes)
	defer client.Close()
	ctx := context.Background()
	_ = client.EndQuarantine(ctx)

	l, err := client.Acquire(ctx, "order:42", 10*time.Second)
	if err != nil {
		panic(err)
	}
	lease, _ := l.Lease(ctx) // its Context carries the hold; WithHold(ctx, l) would too
	token, err := chargeOrder(lease.Context(), client, "42")
	if err != nil {
		panic(err)
	}
	fmt.Println("charged under the job's hold:", token == l.Token())
	fmt.Println("still held:", lease.Err() == nil)
	_ = lease.Close(ctx)
	// Output:
	// charged under the job's hold: true
	// still held: true
}

// With WakeOnRelease, a waiter takes the lock as soon as its holder releases it, instead of at
// its next backoff step: here the waiter's backoff is an hour, yet it gets the lock at once.
func ExampleWakeOnRelease() {
	nodes, stop := localNodes(3)
	defer stop()
	client, _ := redlock.New(nodes)
	defer client.Close()
	waiter, _ := redlock.New(nodes, redlock.WithBackOff(func() backoff.BackOff { return backoff.NewConstantBackOff(time.Hour) }))
	defer waiter.Close()
	ctx := context.Background()
	_ = client.EndQuarantine(ctx)

	held, _ := client.Acquire(ctx, "printer", 10*time.Second)
	refused := make(chan struct{}, 1)
	got := make(chan string)
	go func() {
		// Without WakeOnRelease, the waiter would sleep its hour: this bound would end it.
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		l, err := waiter.Acquire(wctx, "printer", 10*time.Second, redlock.WakeOnRelease(),
			redlock.OnAttempt(func(redlock.Attempt) {
				select {
				case refused <- struct{}{}:
				default:
				}
			}))
		if err != nil {
			got <- "not handed over: " + err.Error()
			return
		}
		got <- fmt.Sprint("handed over with a newer token: ", l.Token() > held.Token())
		_ = l.Release(ctx)
	}()
	<-refused // the waiter found the lock held
	_ = held.Release(ctx)
	fmt.Println(<-got)
	// Output:
	// handed over with a newer token: true
}

// A client's options, for nodes, clocks and waits that differ from the defaults. New checks
// them all, and refuses a TTL above the max TTL before asking any node.
func ExampleNew() {
	nodes, stop := localNodes(3)
	defer stop()
	opts := []redlock.Option{
		redlock.WithQuorum(2),                // of 3 nodes: the default, a majority
		redlock.WithDriftFactor(0.02),        // clocks that drift by up to 2% of a TTL
		redlock.WithMaxTTL(2 * time.Minute),  // locks of up to 2 min; a node that lost its memory refuses locks that long
		redlock.WithBootKey("cronlock:boot"), // the key whose absence shows a node lost its memory (the default)
		redlock.WithMaxWait(5 * time.Second), // Acquire gives up after 5 s of retries
		redlock.WithNodeTimeout(time.Second), // each request to a node may take 1 s (default: TTL/50)
		redlock.WithWaitForReplicas(0),       // nodes without replicas: wait for none (the default)
	}
	client, err := redlock.New(nodes, opts...)
	if err != nil {
		panic(err)
	}
	defer client.Close()
	ctx := context.Background()
	_ = client.EndQuarantine(ctx) // new nodes: nothing to forget
	_, err = client.TryAcquire(ctx, "report", 5*time.Minute)
	fmt.Println("5 min lock refused:", errors.Is(err, redlock.ErrInvalidTTL))
	l, err := client.TryAcquire(ctx, "report", time.Minute)
	fmt.Println("1 min lock taken:", err == nil)
	if err == nil {
		_ = l.Release(ctx)
	}
	// Output:
	// 5 min lock refused: true
	// 1 min lock taken: true
}

// Extend renews a lock by hand (a Lease does it for you); ValidUntil says until when it is
// certainly held. The errors: a TTL the client refuses, too many nodes failing (matching
// ErrQuorumUnavailable, and each failed node's *NodeError with errors.As), a closed client.
func ExampleLock_Extend() {
	nodes, client, stop := newNodesAndClient(redlock.WithNodeTimeout(time.Second))
	defer stop()
	ctx := context.Background()

	_, err := client.TryAcquire(ctx, "batch", time.Hour)
	fmt.Println("an hour:", errors.Is(err, redlock.ErrInvalidTTL))

	opts := []redlock.AcquireOption{redlock.Label("worker-1")}
	l, err := client.Acquire(ctx, "batch", 10*time.Second, opts...)
	if err != nil {
		panic(err)
	}
	before := l.ValidUntil()
	if _, err := l.Extend(ctx); err != nil {
		panic(err)
	}
	fmt.Println("extended:", l.ValidUntil().After(before))

	_ = nodes[1].(*redis.Client).Close() // two of the three nodes cannot be reached
	_ = nodes[2].(*redis.Client).Close()
	_, err = l.Extend(ctx)
	var ne *redlock.NodeError
	if errors.As(err, &ne) {
		fmt.Println("quorum unavailable:", errors.Is(err, redlock.ErrQuorumUnavailable), "a failed node:", ne.Node > 0)
	}

	_ = l.Release(ctx) // node 0 releases the key; the others expire it by its TTL
	_ = client.Close()
	_, err = client.TryAcquire(ctx, "batch", 10*time.Second)
	fmt.Println("closed:", errors.Is(err, redlock.ErrClientClosed))
	// Output:
	// an hour: true
	// extended: true
	// quorum unavailable: true a failed node: true
	// closed: true
}

// Work under a lease finds the lease's state in its context: Err is nil while the lock is
// held, and once the lease is closed the context's cause is ErrLeaseClosed.
func ExampleLease_Close() {
	_, client, stop := newNodesAndClient(redlock.WithNodeTimeout(time.Second))
	defer stop()
	ctx := context.Background()

	l, err := client.Acquire(ctx, "renewed", 10*time.Second)
	if err != nil {
		panic(err)
	}
	opts := []redlock.LeaseOption{redlock.RenewEvery(time.Second), redlock.MaxHold(time.Hour)}
	lease, err := l.Lease(ctx, opts...)
	if err != nil {
		panic(err)
	}
	work := lease.Context()
	fmt.Println("held:", lease.Err() == nil && work.Err() == nil)
	_ = lease.Close(context.Background())
	fmt.Println("closed:", errors.Is(context.Cause(work), redlock.ErrLeaseClosed))
	// Output:
	// held: true
	// closed: true
}
