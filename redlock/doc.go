// Package redlock implements the Redlock algorithm over N independent Redis nodes, with
// fencing tokens, node quarantine after memory loss, and leases whose context is cancelled
// before the lock can expire.
//
// # Acquiring
//
// A Client sends one script per node, in parallel, each bounded by a node timeout, and decides
// as soon as the outcome is known: success at the quorum-th yes, failure as soon as a quorum is
// out of reach. It does not wait for the slowest node. The lock's validity is
// TTL − elapsed − drift, where drift = TTL·DriftFactor + 2ms; the lock is only reported held
// while validity is left.
//
//	l, err := client.Acquire(ctx, "invoice:42", 30*time.Second)
//	if err != nil {
//		return err // errors.Is(err, redlock.ErrNotAcquired), ErrQuorumUnavailable, or ctx's error
//	}
//	defer l.Release(context.WithoutCancel(ctx))
//
// TryAcquire makes one attempt; Acquire retries on a jittered exponential backoff, a fresh
// one per call, until its context ends or MaxWait passes. A lock held elsewhere
// (ErrNotAcquired, with the holder's label in AcquireError.Holder) and nodes that are down
// (ErrQuorumUnavailable) are different errors; both carry every node's error. A key that
// cannot be a lock's fails with ErrInvalidKey, and is not retried: the client's own keys (the
// boot markers, the default fence counters and the lock's FenceKey) are refused before any
// node is asked, and a key under which a node holds a value of another kind (WRONGTYPE) is
// reported as such.
//
// No call waits for a node beyond what decides it: an acquisition returns at the quorum-th
// yes (or as soon as a quorum is out of reach), and Release once a quorum confirmed. What the
// slower nodes answer later is handled by the Client in the background: a late yes to a
// failed or released acquisition is released, and a release that a node missed (it timed out
// or was down) is retried until the lock has expired there. Close stops that work and waits
// for it.
//
// Requests to one node share round trips: the Client queues every request for a node, and a
// few goroutines per node (at most four) each send what is queued as one pipeline, on one
// connection of the node's pool; a goroutine with nothing left to send waits 50ms for more
// before it exits, so a busy Client reuses them. Many locks taken at once — a burst of cron ticks, goroutines
// locking their own keys — thus cost a round trip per node for the lot, and a slow node
// holds at most four connections and goroutines, however many requests wait for it. A
// request still queued when its node timeout passes is not sent. go-redis takes each batch's
// deadline from its context (ContextTimeoutEnabled), for the dial and handshake of a new
// connection too; the batch's context is never cancelled, so go-redis's PoolTimeout bounds
// only a wait for a pool whose connections are all in use elsewhere.
//
// When many clients race for one key at the same instant — as every replica of a cron job
// does at every tick — a plain parallel Redlock splits the vote: each racer gets some nodes,
// none a majority, all release and retry. A Client remembers which locks it recently saw held
// (for 10 minutes after it saw one held); for those it asks the lock's primary node (hash of the key's hash
// tag, or of the key without one, mod N) first and alone, and fans out only if the primary said yes. A loser then costs one
// request and leaves nothing to release. If the primary is down, it falls back to the
// parallel path. The first race on a calm key can still split: TryAcquire then fails with
// ErrNotAcquired although no one holds the lock, and Acquire tries again. A lock left on the
// primary node by a release that missed it refuses the primary-first attempts until its TTL,
// although no one holds a quorum; Acquire asks every node once the primary refused three
// attempts in a row for the same holder. (Package scheduler's lock settles split votes and
// such leftovers for its ticks, see docs/scheduler.md.)
//
// # Fencing tokens
//
// Each acquisition gets a token (Lock.Token) strictly greater than the token of every
// acquisition from the same fence counter that had returned before it started (FenceKey; by
// default one counter per hash tag, "{t}:fence" for keys tagged {t}, and "cronlock:fence" for
// every key without a tag, so that locking any number of distinct keys leaves a bounded number
// of counters behind). Successive holders of one key thus get strictly increasing tokens, even
// when the successor's attempt set out before its predecessor's acquisition returned: a
// release raises the counter of each node it frees to the lock's token. The one exception is a
// hold that ended without its release (it expired, or was revoked) while such an attempt was
// on its way: the two attempts then took longer than the TTL together, or the revocation came
// within an attempt of the acquisition.
// Acquisitions that overlap in time — locks on different keys sharing a counter, taken at
// once — are in no order with each other: they may get equal tokens, or the later to return a
// lower one. Tokens are not unique per counter. Pass it to the storage the lock
// guards, and have the storage refuse writes with a token lower than one it has seen: a holder
// that was paused past its lease (a GC pause, SIGSTOP) is then refused, which the lock alone
// cannot do. Each node keeps a counter per fence key; the token is the highest counter of the
// quorum, written back to a quorum when the counters differed. A counter is created at the
// node's clock in microseconds, so a node that lost its memory restarts above every token it
// issued. This holds while node clocks agree within MaxTTL, a counter is incremented less
// than once per microsecond on average (a Redis node runs far fewer scripts than that), and
// fewer than a quorum of nodes lose their memory at once.
// Counters never expire: run lock nodes with maxmemory-policy noeviction.
//
// # Quarantine
//
// A node that restarts without its data would forget the locks it held, and could help a
// second client take a lock the first still holds. Each node keeps a boot marker; when it is
// missing, the node refuses locks for MaxTTL (it answers "quarantined"), after which every lock it
// forgot has expired. New nodes look the same: call Client.EndQuarantine on first deployment.
// An acquisition reads the marker only where it creates the lock's fence counter on the node:
// a node loses its counters with its marker, and no counter is written on a node in
// quarantine, so a counter that exists shows that the node ended its quarantine. (Deleting the
// marker by hand therefore does not put a node back in quarantine; flushing the node does.)
// Where the nodes are Redis Clusters, the marker is per hash slot (see Nodes), so a shard that
// restarts empty quarantines the slots it serves and no other.
//
// # Leases
//
// Lock.Lease starts a goroutine that extends the lock every RenewEvery (default TTL/3). The
// lease's Context has the lock's validity as its deadline, moved forward only by extensions
// that a quorum confirmed, and is cancelled with cause ErrLeaseLost no later than that
// deadline — before any node can let the lock go, so before anyone else can take it. Its Err
// also checks the clock, so work resumed after a process pause sees the loss at once. MaxHold
// bounds how long a lease may keep a lock. Close stops the goroutine, waits for
// it, and releases the lock; the Client's Close does the same for every lease not closed yet
// (see Lifecycle), cancelling its context with cause ErrClientClosed. A lock has at most one
// lease, and a released lock none: Lease then fails with ErrLockLost.
//
// # Reentrancy
//
// Go has no thread identity, so a hold belongs to a context. Acquiring a key with a context
// that carries a live hold of that key from the same Client — a lease's context does, and
// WithHold adds one — takes a nested hold instead of waiting on itself: the hold, under an id
// of its own, joins the lock's holds on the nodes, on a quorum, and the nested Lock shares the
// outer lock's value, fencing token and validity. Each node counts exactly the holds it
// took: a release removes its own hold, and only where it was counted, and the lock leaves a
// node only when no hold is counted there, so while any hold is live the lock stays on the
// quorum that confirmed it. A hold's release may reach a node before the hold itself (they
// travel on different connections): the node then never counts it. A nested acquisition that
// fails is released on every node at once. Each hold is released once; the lock leaves the
// nodes with the last release, whatever the order, and the outer lease's renewals keep the
// whole nest alive. A hold whose lock is no longer ours on the nodes is never reentered.
//
//	func charge(ctx context.Context, orderID string) error {
//		l, err := client.Acquire(ctx, "order:"+orderID, 30*time.Second) // nests under a caller's hold
//		if err != nil {
//			return err
//		}
//		defer l.Release(context.WithoutCancel(ctx))
//		// ...
//	}
//
// # Waking on release
//
// With WakeOnRelease, Acquire also subscribes, while it waits, to the channel on which every
// node announces the lock's release (key + ":released"), and tries again as soon as one is
// announced rather than at its next backoff step. A lock handed from one worker to the next
// then moves in about one round trip. Notifications are a hint: a lost one costs a backoff
// step, never safety. Acquire listens on the lock's primary node; if that node does not
// confirm within the node timeout, on the others.
//
// # Lifecycle
//
// Every call is bounded by what the docs say bounds it, and Close ends everything:
//
//   - a request to a node by the node timeout (WithNodeTimeout), whatever the node does —
//     one that accepts connections and never answers included;
//   - Acquire by its ctx and MaxWait, and by Close: an Acquire waiting in its backoff returns
//     at once, with an error matching ErrClientClosed;
//   - with WakeOnRelease, the subscription to a lock's primary node by the lock's node
//     timeout, after which Acquire listens on the other nodes — so a node that never answers
//     costs at most a node timeout or a backoff step, not a missed wake-up;
//   - Close by the node timeout of the requests it waits for: it wakes waiting Acquires, ends
//     every Lease that is not closed (renewal stopped, context cancelled with cause
//     ErrClientClosed, lock released in parallel, each release bounded by the node timeout;
//     Lease.Close afterwards returns that release's result, nil when it succeeded), stops
//     retrying missed releases, cancels its background requests and waits for every goroutine
//     it started — a connection being opened to a node that never answers for at most 4 node
//     timeouts (see WithNodeTimeout). Calls after Close fail with ErrClientClosed.
//
// Close does not close the nodes' go-redis clients, which belong to the caller.
//
// # Logs
//
// The Client logs nothing itself: failures come back as errors, a lost lease through its
// context's cause.
// go-redis, though, writes its own lines (a node that refuses connections: "failed to dial
// after 5 attempts") to its global logger, by default stderr. A library does not change a
// process's globals; the program decides, once, e.g. to send them to its slog logger:
//
//	type redisLog struct{ l *slog.Logger }
//
//	func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
//		r.l.WarnContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
//	}
//
//	redis.SetLogger(redisLog{logger}) // before creating the node clients
//
// The cronlock daemon does this with its own logger, at most one line per kind every 10s.
//
// # What it does not promise
//
// A lock does not make side effects happen exactly once: work that ignores its context, or
// that was paused between its last check and its write, can still act after its lease ended.
// Fencing tokens checked by the storage close that gap; the lock alone cannot. Safety holds
// while fewer than a quorum of nodes lose their memory at once, and while the nodes' clocks do
// not jump by more than the drift allowance within a TTL.
//
// # Nodes
//
// A Node is any go-redis client that runs scripts; its options must have
// ContextTimeoutEnabled set, so that the node timeout applies. A Redis Cluster or a
// Sentinel-managed primary may stand as one node; then every key of one lock must share a hash
// tag (a key of another slot is refused before any request).
//
// A Cluster runs a script only on keys of one hash slot, so when a node is a
// *redis.ClusterClient (or with WithClusterNodes) the keys the client adds are taken per slot:
// the boot marker of a lock whose keys are in slot S is the boot key + ":{" + t + "}", t being
// the smallest decimal number that hashes to S, and a key without a hash tag gets the fence
// counter "cronlock:fence:{" + t + "}". EndQuarantine then writes the marker of every slot.
//
// A Client and its Locks and Leases are safe for concurrent use.
//
// # API at a glance
//
// Every exported identifier, by task.
//
//	Task                         Identifiers
//	---------------------------  ------------------------------------------------------------
//	making a client              New, Node, Option, Client.Close; WithQuorum, WithEvenNodes,
//	                             WithNodeTimeout, WithDriftFactor, WithMaxWait, WithBackOff,
//	                             WithLabel
//	taking a lock                Client.Acquire, Client.TryAcquire, Lock.Release, Lock.Extend;
//	                             Lock.Key, Lock.Value, Lock.ValidUntil
//	one acquisition's options    AcquireOption: Label, Metadata, Also, WakeOnRelease
//	why it failed                ErrNotAcquired (AcquireError, Holder), ErrQuorumUnavailable
//	                             (NodeError), ErrInvalidKey, ErrInvalidTTL
//	                             ErrNotReplicated, ErrClientClosed
//	fencing tokens               Lock.Token, FenceKey
//	leases                       Lock.Lease, LeaseOption: RenewEvery, MaxHold; Lease.Context
//	                             (its cause: Lease.Err), Lease.Lock, Lease.Close; ErrLeaseLost,
//	                             ErrLeaseClosed, ErrLockLost
//	nested holds                 WithHold (a lease's context nests too)
//	quarantine                   WithBootKey, WithMaxTTL, WithoutQuarantine,
//	                             Client.EndQuarantine
//	cluster and replicated nodes WithClusterNodes, WithWaitForReplicas, WithNodeReplicas
package redlock
