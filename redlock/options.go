package redlock

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/cenkalti/backoff/v4"

	"github.com/cronlock/cronlock/internal/jitter"
	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
)

// Option configures a Client. Each option documents its default.
type Option func(*config) error

type config struct {
	quorum       int
	evenNodes    bool
	driftFactor  float64
	nodeTimeout  time.Duration
	maxTTL       time.Duration
	quarantine   bool
	bootKey      string
	cluster      bool // per-slot boot markers and default fence counters (WithClusterNodes)
	newBackOff   func() backoff.BackOff
	maxWait      time.Duration
	label        string
	replicas     int         // WithWaitForReplicas
	nodeReplicas map[int]int // WithNodeReplicas, by node
	// byNode is how many replicas each node waits for (nil: none), from the two above.
	byNode []int
	linger time.Duration // how long an idle sender goroutine waits for work (linger)
}

func defaultConfig() config {
	host, _ := os.Hostname()
	return config{
		driftFactor: 0.01,
		maxTTL:      lockseam.DefaultMaxTTL,
		quarantine:  true,
		bootKey:     layout.BootKey,
		newBackOff:  jitter.LockRetries,
		label:       fmt.Sprintf("%s-%d", host, os.Getpid()),
		linger:      linger,
	}
}

// WithQuorum sets how many nodes must agree. Default: a majority, len(nodes)/2+1. A quorum of
// less than a majority is refused: two holders could each have one.
func WithQuorum(n int) Option {
	return func(c *config) error {
		if n <= 0 {
			return fmt.Errorf("redlock: quorum %d: must be at least 1", n)
		}
		c.quorum = n
		return nil
	}
}

// WithEvenNodes allows an even number of nodes. Default: refused, because an even count costs
// one more node than the odd count below it and tolerates no more failures.
func WithEvenNodes() Option {
	return func(c *config) error { c.evenNodes = true; return nil }
}

// WithDriftFactor sets the clock drift allowance, as a fraction of the TTL: a lock's validity
// is TTL − elapsed − (TTL·factor + 2ms). Default 0.01. It must be in [0, 0.5).
func WithDriftFactor(f float64) Option {
	return func(c *config) error {
		if f < 0 || f >= 0.5 {
			return fmt.Errorf("redlock: drift factor %v: must be in [0, 0.5), e.g. 0.01", f)
		}
		c.driftFactor = f
		return nil
	}
}

// WithNodeTimeout sets how long one request to one node may take. Default: TTL/50 for
// acquisitions and extensions (at least 5ms), and the same rule applied to the lock's TTL for
// releases. The Client's background requests to a node — a retried release, the opening of a
// connection (with its handshake) after a request failed — take at most 4 times the node
// timeout of MaxTTL, or the node client's DialTimeout if shorter; Close waits for them.
func WithNodeTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: node timeout %v: must be positive", d)
		}
		c.nodeTimeout = d
		return nil
	}
}

// WithMaxTTL sets the longest TTL a lock may ask for, which is also how long a node that lost
// its memory refuses locks (its quarantine). Default 1 minute.
func WithMaxTTL(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: max TTL %v: must be positive", d)
		}
		c.maxTTL = d
		return nil
	}
}

// WithWaitForReplicas makes each node's yes count only once n of that node's replicas
// acknowledged it, for nodes that are a primary with replicas (behind Sentinel, say): the
// acquire script and a WAIT n go out in one pipeline, and a node whose replicas did not
// acknowledge within the node timeout counts as failed (ErrNotReplicated). Without it a
// failover to a replica that missed the lock forgets the lock and its fence counter, silently.
// The locks' extensions and fencing write-backs wait the same way. Each node must be a go-redis
// client (it pipelines). Cost: the replication round trip, on every node, on every
// acquisition and renewal. WithNodeReplicas gives a node a count of its own. Default 0: do not
// wait.
func WithWaitForReplicas(n int) Option {
	return func(c *config) error {
		if n < 0 {
			return fmt.Errorf("redlock: WithWaitForReplicas(%d): give how many replicas of each node must acknowledge, or 0 not to wait", n)
		}
		c.replicas = n
		return nil
	}
}

// WithNodeReplicas makes the acquisitions of the client wait for n replicas of node (its index
// in New's nodes) instead of WithWaitForReplicas's count, for nodes that do not all have the
// same replicas: 1 for a primary with a replica, 0 for a standalone server. Give it once per
// node that differs. Default: the count of WithWaitForReplicas.
func WithNodeReplicas(node, n int) Option {
	return func(c *config) error {
		if node < 0 || n < 0 {
			return fmt.Errorf("redlock: WithNodeReplicas(%d, %d): give a node's index in the nodes and how many of its replicas must acknowledge (0 not to wait)", node, n)
		}
		if c.nodeReplicas == nil {
			c.nodeReplicas = make(map[int]int)
		}
		c.nodeReplicas[node] = n
		return nil
	}
}

// countReplicas sets c.byNode for n nodes from WithWaitForReplicas and WithNodeReplicas.
func (c *config) countReplicas(n int) error {
	byNode := make([]int, n)
	waits := false
	for i := range byNode {
		byNode[i] = c.replicas
		if r, ok := c.nodeReplicas[i]; ok {
			byNode[i] = r
		}
		waits = waits || byNode[i] > 0
	}
	for node := range c.nodeReplicas {
		if node >= n {
			return fmt.Errorf("redlock: WithNodeReplicas(%d, …): there are %d nodes, indexed from 0 to %d", node, n, n-1)
		}
	}
	if waits {
		c.byNode = byNode
	}
	return nil
}

// WithoutQuarantine turns off node quarantine. Default: on — a node whose boot marker is
// missing (it is new, or lost its memory) refuses locks for MaxTTL, so it cannot help a second
// holder take a lock that it forgot. Turn it off only for nodes that persist every write
// (appendfsync always), or in tests.
func WithoutQuarantine() Option {
	return func(c *config) error { c.quarantine = false; return nil }
}

// WithBootKey sets the key of each node's boot marker. Default "cronlock:boot". Where the
// nodes are Redis Clusters (WithClusterNodes), key is the prefix of one marker per hash slot,
// key + ":{" + tag + "}", and must not contain "{".
func WithBootKey(key string) Option {
	return func(c *config) error {
		if key == "" {
			return errors.New("redlock: boot key is empty: give a key name, e.g. \"cronlock:boot\"")
		}
		c.bootKey = key
		return nil
	}
}

// WithClusterNodes makes the client lay its keys out for nodes that are Redis Clusters: one
// boot marker per hash slot instead of one per node, and, for lock keys without a hash tag,
// one default fence counter per slot instead of the node's "cronlock:fence", so that every script touches
// the keys of one slot only. A Cluster shard that restarts empty then loses the markers of the
// slots it serves, and only those slots are in quarantine. It applies to every node, standalone
// ones too, and EndQuarantine then writes the marker of every slot (16,384 keys per node). It
// is implied when any node is a *redis.ClusterClient; give it for Cluster nodes wrapped in a
// Node of your own. Default: per-node keys, unless a node is a *redis.ClusterClient.
func WithClusterNodes() Option {
	return func(c *config) error { c.cluster = true; return nil }
}

// WithBackOff sets the factory of the retry schedule used by Acquire; it is called once per
// Acquire, so schedules are never shared between calls. Default: exponential from 10ms,
// doubling up to 500ms, with full jitter (each wait is uniform in [0, step]), without an
// elapsed-time limit (Acquire applies its context and MaxWait).
func WithBackOff(newBackOff func() backoff.BackOff) Option {
	return func(c *config) error {
		if newBackOff == nil {
			return errors.New("redlock: backoff factory is nil: pass a func that returns a new backoff.BackOff")
		}
		c.newBackOff = newBackOff
		return nil
	}
}

// WithMaxWait bounds how long Acquire retries, besides its context. Default: the max TTL, the
// longest a holder can keep a lock without renewing it.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return fmt.Errorf("redlock: max wait %v: must be positive", d)
		}
		c.maxWait = d
		return nil
	}
}

// WithLabel sets the label stored beside every lock this client takes, reported to clients
// that are refused. Default "hostname-pid".
func WithLabel(label string) Option {
	return func(c *config) error { c.label = label; return nil }
}

// AcquireOption configures one acquisition.
type AcquireOption func(*acquireConfig)

type acquireConfig struct {
	also       []string
	fenceKey   string
	metadata   string
	label      string
	onAttempt  func(lockseam.Attempt)
	wake       bool
	splits     int
	before     time.Time
	refuse     []string
	everyNode  bool
	counter    string        // countAcquisitions
	counterTTL time.Duration // countAcquisitions
}

// Also takes these keys together with the primary key, atomically on each node: the lock is
// acquired only if all of them are free. They are extended and released with it. Where a node
// is a Redis Cluster, every key must share the primary key's hash tag.
func Also(keys ...string) AcquireOption {
	return func(c *acquireConfig) { c.also = append(c.also, keys...) }
}

// countAcquisitions counts the successful acquisitions made with this option and counter key,
// across every client: the lock's acquisitions field holds the count, this acquisition included. Use it
// to bound the attempts at one piece of work wherever they are made (a cron tick's retries
// across replicas). The count is kept on the nodes under key for ttl after each acquisition,
// and written back to a quorum before the acquisition succeeds (one more round trip), so the
// next acquisition sees it however the quorums differ. Only acquisitions that succeed count.
// Where a node is a Redis Cluster, key must share the lock key's hash tag.
func countAcquisitions(key string, ttl time.Duration) AcquireOption {
	return func(c *acquireConfig) { c.counter, c.counterTTL = key, ttl }
}

// FenceKey sets the key of the fencing counter. Default: one counter per hash tag — a key
// with the hash tag {t} uses "{t}:fence" — and "cronlock:fence" for keys without one, so that
// locking any number of distinct keys leaves a bounded number of counters on the nodes.
// Tokens strictly increase per counter from one acquisition to the next that starts after it
// returned, hence from one holder of a key to the next (overlapping acquisitions of different
// keys on one counter may get equal tokens). Locks that guard the same resource
// under different keys must share a fence key, so that their tokens are ordered with each
// other; where a node is a Redis Cluster, the fence key must share the lock key's hash tag.
func FenceKey(key string) AcquireOption {
	return func(c *acquireConfig) { c.fenceKey = key }
}

// Metadata stores s beside the lock; a client that is refused sees it in Holder.Metadata.
// Default empty.
func Metadata(s string) AcquireOption {
	return func(c *acquireConfig) { c.metadata = s }
}

// Label overrides the client's label (WithLabel) for this acquisition.
func Label(s string) AcquireOption {
	return func(c *acquireConfig) { c.label = s }
}

// onAttempt calls f after every attempt of the acquisition, successful or not, in the
// goroutine that called Acquire or TryAcquire (lockseam.OnAttempt).
func onAttempt(f func(lockseam.Attempt)) AcquireOption {
	return func(c *acquireConfig) { c.onAttempt = f }
}

// WakeOnRelease makes Acquire, while it waits for a held lock, also listen for the lock's
// release on the nodes (a release publishes on the channel key + ":released" of each node
// where an attempt of a subscribed waiter was refused) and try again as soon as one is
// announced, instead of at the next backoff step. A lock handed from
// one worker to the next then moves in about two round trips (the woken attempt asks the
// lock's primary node, then the others); when the release reached the primary node before
// the others, the woken attempt waits for it to land there, up to the node timeout, rather
// than fail. The backoff schedule, the context and MaxWait still bound the wait; when no node
// can notify (or a notification is lost), the backoff alone drives it. The subscriptions end
// before Acquire returns. Default off: a waiter costs a subscription connection while it
// waits (to the primary node, or to each other node when the primary cannot be subscribed
// to).
func WakeOnRelease() AcquireOption {
	return func(c *acquireConfig) { c.wake = true }
}

// resolveSplits makes TryAcquire try again, up to n times, after a refusal that may have left
// the lock to no one. Racers that ask every node at the same instant — the replicas of a cron
// job at each tick — can split the vote: each takes some nodes, none a quorum, and all are
// refused. Before each new attempt it waits for the failed attempts to be released (twice the
// attempt's duration, at most the node timeout) plus a step of the client's backoff; by then
// the key is known contended, so the primary node is asked first, which settles the race.
// Acquire, which tries again after every refusal anyway, ignores it. Default 0.
func resolveSplits(n int) AcquireOption {
	return func(c *acquireConfig) { c.splits = n }
}

// startBefore bounds the acquisition in time like a context deadline that cuts no request:
// no attempt starts at or after t, while an attempt started before t runs to its end. An
// acquisition called at or after t fails at once with an error matching
// context.DeadlineExceeded. Default: no bound.
func startBefore(t time.Time) AcquireOption {
	return func(c *acquireConfig) { c.before = t }
}

// refuseWhile makes every node refuse the lock while key exists there: each node's answer is
// a *refusal carrying key's value (a string key), reported as AcquireError.refusal with the
// reason ErrNotAcquired. Written to a quorum of nodes, key thus refuses every acquisition until
// it is deleted from enough nodes, at no extra round trip. Such a refusal is final for
// TryAcquire (never taken for a split vote); Acquire keeps trying while the key exists, within
// its context and MaxWait. It may be given more than once. Where a node is a Redis Cluster,
// key must share the primary key's hash tag. A nested hold (see Acquire) does not look at it.
func refuseWhile(key string) AcquireOption {
	return func(c *acquireConfig) { c.refuse = append(c.refuse, key) }
}

// askEveryNode makes each attempt of the acquisition ask every node in parallel, even while
// the lock is contended (see contentionWindow): a refusal by the lock's primary node alone
// is then not final, and the lock is refused only where a quorum cannot be had. A release that
// missed the primary node (down, cut off or too slow when the holder released) leaves the lock
// there until its TTL, and every client's contended attempts, which ask the primary node first
// and alone, are refused by it meanwhile although no one holds a quorum. Use it to look again
// at a lock that may be such a leftover; Acquire does so by itself after the primary refused
// three attempts in a row for the same holder. Racers
// that ask every node may split the vote (see resolveSplits). Default off.
func askEveryNode() AcquireOption {
	return func(c *acquireConfig) { c.everyNode = true }
}
