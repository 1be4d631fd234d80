package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/ctxsleep"
	"github.com/cronlock/cronlock/internal/lockseam"
)

// request is a validated acquisition: its keys, the lock it asks for, how its attempts are
// made, and what the attempts so far found.
type request struct {
	requestKeys
	lockArgs
	attemptPolicy
	progress
}

// requestKeys are the keys an acquisition names, and how the acquire script takes them.
type requestKeys struct {
	keys     []string // boot marker ("" when quarantine is off), fence counter, primary key, also keys
	release  []string // the lock's keys (keys[2:]), then the fence counter: the release script's keys
	script   []string // keys (without the boot marker when quarantine is off), then the refuseWhile keys: the acquire script's keys
	refuse   any      // how many refuseWhile keys end script
	refusing []string // the refuseWhile keys
	fenceKey string
	counter  string        // CountAcquisitions' key, the last of script; "" without
	counted  any           // "1" with CountAcquisitions, "0" without: the script's ARGV[7]
	countTTL time.Duration // CountAcquisitions' ttl
	group    string        // primaryGroup of the primary key
}

// lockArgs describe the lock an acquisition asks for.
type lockArgs struct {
	ttl      time.Duration
	ttlms    any // ttl in milliseconds, the scripts' argument
	label    string
	labelArg any // label, boxed once
	metadata string
	replicas []int // by node (nil: none), WithWaitForReplicas
	hold     *Lock // a live hold of the key that the caller's context carries
}

// attemptPolicy is how an acquisition makes its attempts.
type attemptPolicy struct {
	hook   func(lockseam.Attempt)
	wake   bool
	every  bool      // askEveryNode
	splits int       // resolveSplits
	before time.Time // startBefore
}

// progress is what an acquisition's attempts so far found, for the next one.
type progress struct {
	// listening: the acquisition is subscribed to the lock's releases (WakeOnRelease), so its
	// refusals by the primary key mark the lock for the release to publish (acquire.lua).
	listening bool
	sweep     bool // this attempt asks every node (Acquire, see sweepAfter)
	// refusedBy is the lock value of the holder whose primary node alone refused the last
	// attempts, and refusals how many in a row; "" and 0 after any other outcome.
	refusedBy string
	refusals  int
	last      lockseam.Attempt // the last attempt made
	// values are the lock values of the last attempts made, the attempt n-1 at values[(n-1) %
	// maxOwnValues], which a failure reports (AcquireError.own): a key found held under one of
	// them is a leftover of this acquisition's own failed attempt, not another holder. made
	// counts the attempts made.
	values [maxOwnValues]string
	made   int
}

// maxOwnValues is how many of an acquisition's last attempts a failure reports as its own.
const maxOwnValues = 8

// making records the lock value of an attempt being made.
func (p *progress) making(value string) {
	p.values[p.made%maxOwnValues] = value
	p.made++
}

// own returns the lock values of the last attempts made (at most maxOwnValues).
func (p *progress) own() []string {
	return slices.Clone(p.values[:min(p.made, maxOwnValues)])
}

func (r *request) lockKeys() []string { return r.keys[2:] }

// report records a finished attempt and passes it to the onAttempt hook.
func (r *request) report(a lockseam.Attempt) {
	r.last = a
	if r.hook != nil {
		r.hook(a)
	}
}

// mayBeSplit reports whether the refusal err of the last attempt may have left the lock to
// no one: racers that asked every node at the same instant can split the vote, each taking
// some nodes and none a quorum. That is possible when the attempt took a node (so no one else
// holds them all); when it asked every node and was decided before every reply was in (a
// failure is decided as soon as a quorum is out of reach, so its own yes from the last node
// may have come late, and then no one may hold a quorum); or when the primary key was found
// held under this acquisition's own label (a leftover of its own failed attempt). A refusal
// by the primary node, asked first and alone, is final: whoever holds it either wins, or
// fails with a node taken and tries again itself. So is a refusal by a done marker (see Lock.release):
// only a holder that had the lock on a quorum leaves one, so the vote did not split.
func (r *request) mayBeSplit(err error, nodes int) bool {
	ae, ok := errors.AsType[*AcquireError](err)
	if !ok || r.hold != nil || !errors.Is(ae.Reason, ErrNotAcquired) || ae.refusal != nil ||
		(ae.Holder != nil && ae.Holder.Done) {
		return false
	}
	a := r.last
	switch {
	case a.OK > 0:
		return true
	case !a.PrimaryFirst && a.OK+a.Refused+a.Quarantined+a.Failed < nodes:
		return true
	}
	h := ae.Holder
	return h != nil && !h.Done && h.Key == r.keys[2] && r.label != "" && h.Label == r.label
}

// newRequest validates an acquisition of key for ttl with opts.
func (c *Client) newRequest(ctx context.Context, key string, ttl time.Duration, opts []AcquireOption) (*request, error) {
	var ac acquireConfig
	for _, o := range opts {
		o(&ac)
	}
	if key == "" {
		return nil, errors.New("redlock: key is empty: give the name of the resource to lock")
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("redlock: lock %s: %w", quote(key), err)
	}
	if err := c.checkTTL(ttl); err != nil {
		return nil, err
	}
	if !ac.before.IsZero() && !time.Now().Before(ac.before) {
		return nil, fmt.Errorf("redlock: lock %s: the StartBefore time has passed: %w", quote(key), context.DeadlineExceeded)
	}
	rk, err := c.requestKeys(key, &ac)
	if err != nil {
		return nil, err
	}
	args := lockArgs{ttl: ttl, ttlms: c.ttlArg(ttl), label: c.cfg.label, labelArg: c.label, metadata: ac.metadata,
		replicas: c.cfg.byNode, hold: c.heldBy(ctx, key)}
	if ac.label != "" {
		args.label, args.labelArg = ac.label, ac.label
	}
	return &request{requestKeys: rk, lockArgs: args,
		attemptPolicy: attemptPolicy{hook: ac.onAttempt, wake: ac.wake, every: ac.everyNode, splits: ac.splits, before: ac.before}}, nil
}

// requestKeys validates the keys of an acquisition of key and returns them: the lock's keys
// (Also), then the acquire script's (refuseWhile, CountAcquisitions).
func (c *Client) requestKeys(key string, ac *acquireConfig) (requestKeys, error) {
	rk := requestKeys{fenceKey: ac.fenceKey, refusing: ac.refuse, counter: ac.counter, countTTL: ac.counterTTL,
		refuse: "0", counted: "0", group: primaryGroup(key)}
	if rk.fenceKey == "" {
		rk.fenceKey = c.defaultFenceKey(key)
	}
	keys, err := c.lockKeysOf(key, rk.fenceKey, ac.also)
	if err != nil {
		return rk, err
	}
	// lockKeysOf left room for the fence counter after the lock's keys: the release's keys
	// share their array. (The appends to script below copy it.)
	rk.keys, rk.script, rk.release = keys, keys, append(keys[2:], rk.fenceKey)
	if keys[0] == "" { // no quarantine: the script takes no boot marker
		rk.script = keys[1:]
	}
	for _, k := range ac.refuse {
		if k == "" {
			return rk, fmt.Errorf("redlock: RefuseWhile key is empty for lock %q: give the key whose existence refuses the lock", key)
		}
		if slices.Contains(keys[1:], k) {
			return rk, fmt.Errorf("redlock: RefuseWhile key %q is also a key of lock %q: give a key of its own", k, key)
		}
		rk.script = append(rk.script[:len(rk.script):len(rk.script)], k)
	}
	if len(ac.refuse) > 0 {
		rk.refuse = strconv.Itoa(len(ac.refuse))
	}
	if ac.counter != "" {
		if ac.counterTTL <= 0 {
			return rk, fmt.Errorf("redlock: lock %s: CountAcquisitions(%q, %v): give a positive ttl for the count", quote(key), ac.counter, ac.counterTTL)
		}
		if slices.Contains(rk.script, ac.counter) || ac.counter == keys[0] {
			return rk, fmt.Errorf("redlock: CountAcquisitions key %q is also a key of lock %q: give a key of its own", ac.counter, key)
		}
		rk.script, rk.counted = append(rk.script[:len(rk.script):len(rk.script)], ac.counter), "1"
	}
	return rk, c.checkSlots(key, rk.script)
}

// lockKeysOf validates the keys of a lock and returns them: its boot marker ("" when
// quarantine is off), its fence counter, key and the Also keys.
func (c *Client) lockKeysOf(key, fence string, also []string) ([]string, error) {
	keys := append(make([]string, 0, 3+len(also)+1), c.bootMarker(key), fence, key) // +1: requestKeys' release
	for _, k := range also {
		if k == "" {
			return nil, fmt.Errorf("redlock: Also key is empty for lock %q", key)
		}
		if slices.Contains(keys[2:], k) {
			return nil, fmt.Errorf("redlock: Also key %q repeats a key of lock %q: give each key once", k, key)
		}
		keys = append(keys, k)
	}
	return keys, c.checkOwnKeys(fence, keys[2:])
}

// TryAcquire makes one attempt to acquire the lock named key for ttl — more only after a
// split vote, with resolveSplits. It fails with an error matching ErrNotAcquired when the lock
// is held elsewhere, and ErrQuorumUnavailable when too many nodes are down. It is reentrant by
// context, like Acquire.
func (c *Client) TryAcquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	req, err := c.newRequest(ctx, key, ttl, opts)
	if err != nil {
		return nil, err
	}
	var b backoff.BackOff
	for n := 1; ; n++ {
		l, err := c.attempt(ctx, req, n)
		if err == nil {
			return l, nil
		}
		if n > req.splits || ctx.Err() != nil || !req.mayBeSplit(err, len(c.nodes)) {
			return nil, withContext(ctx, err)
		}
		if b == nil {
			b = c.cfg.newBackOff()
		}
		// Let the failed attempts of this round (ours and the other racers') be released
		// first, or the next one could be refused by their leftovers: their releases were
		// sent when the attempts failed, take about as long as an attempt, and are over
		// within the node timeout.
		settle := min(2*req.last.Elapsed+time.Millisecond, c.nodeTimeout(req.ttl))
		wait := b.NextBackOff()
		if wait == backoff.Stop || !req.startsBefore(time.Now().Add(settle+wait)) || !ctxsleep.Sleep(ctx, settle+wait) ||
			!req.startsBefore(time.Now()) {
			return nil, withContext(ctx, err)
		}
	}
}

// startsBefore reports whether an attempt may start at t (startBefore).
func (r *request) startsBefore(t time.Time) bool { return r.before.IsZero() || t.Before(r.before) }

// Acquire acquires the lock named key for ttl, retrying on the client's backoff schedule
// (WithBackOff) while the lock is held or the nodes are unavailable, until ctx ends or MaxWait
// has passed. Its error keeps every cause: the last attempt's error, and ctx's error and cause
// if ctx ended. When the lock's primary node alone refused three attempts in a row for the
// same holder, the next attempt asks every node at once (as askEveryNode does), so that a lock
// left on the primary node by a release that missed it delays Acquire by a few backoffs, not
// until its TTL.
//
// Acquisitions are reentrant by context. When ctx carries a live hold of key taken from this
// Client — a lease's context does, and WithHold adds one — Acquire takes a nested hold
// instead of waiting for the lock: the hold count on the nodes goes up by one (on a quorum,
// like any acquisition), and the nested Lock shares the outer one's value, fencing token and
// validity; ttl and the options that shape the lock (Also, FenceKey, Metadata) are those of
// the outer lock. Every hold is released on its own, and the lock leaves the nodes with the
// last release. A hold in ctx that is no longer ours on the nodes (it expired and someone else
// took the key) is never reentered: the acquisition fails with ErrNotAcquired.
func (c *Client) Acquire(ctx context.Context, key string, ttl time.Duration, opts ...AcquireOption) (*Lock, error) {
	req, err := c.newRequest(ctx, key, ttl, opts)
	if err != nil {
		return nil, err
	}
	b := c.cfg.newBackOff()
	giveUp := time.Now().Add(c.cfg.maxWait)
	var w *waker
	defer func() { w.close() }()
	if !req.before.IsZero() && req.before.Before(giveUp) {
		giveUp = req.before
	}
	for n := 1; ; n++ {
		req.sweep = req.refusals >= sweepAfter
		l, err := c.attempt(ctx, req, n)
		if err == nil {
			return l, nil
		}
		if req.final(ctx, err) {
			return nil, withContext(ctx, err)
		}
		if req.wake && w == nil && errors.Is(err, ErrNotAcquired) {
			// Listen for the release from now on, then try again at once: the release may
			// have come before the subscription.
			if w = c.subscribe(ctx, req); w != nil {
				req.listening = true
				continue
			}
			req.wake = false // no node can notify: plain backoff
		}
		wait, left := b.NextBackOff(), time.Until(giveUp)
		if wait == backoff.Stop || left <= 0 {
			return nil, fmt.Errorf("%w (gave up after %d attempts)", err, n)
		}
		t := time.NewTimer(min(wait, left))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, withContext(ctx, err)
		case <-c.bg.Done(): // Close
			t.Stop()
			return nil, errors.Join(err, ErrClientClosed)
		case <-t.C:
		case <-w.C():
			t.Stop()
		}
		if !req.startsBefore(time.Now()) {
			return nil, fmt.Errorf("%w (gave up after %d attempts: StartBefore)", err, n)
		}
	}
}

// final reports whether Acquire gives up at once after the failed attempt err, without a
// retry: ctx ended, the client is closed, a key holds a value of another kind, or the hold
// that ctx carries was not found (it is lost, and waiting cannot bring it back).
func (r *request) final(ctx context.Context, err error) bool {
	return ctx.Err() != nil || errors.Is(err, ErrClientClosed) || errors.Is(err, ErrInvalidKey) ||
		(r.hold != nil && errors.Is(err, ErrNotAcquired))
}

// sweepAfter makes Acquire ask every node at once (as askEveryNode does), although the key is
// contended, after the primary node alone refused that many attempts in a row for one and the
// same holder. A release that missed the lock's primary node leaves the lock there until its
// TTL, and a contended attempt takes the primary's refusal as final; the sweep looks past it
// after a few backoffs (with the default backoff, some 70 ms into the wait) instead of a TTL.
// Under contention the holder changes from one attempt to the next, and attempts keep the
// primary-first path, which spares the nodes and does not split the vote; a sweep that finds
// a live holder (one holding the lock through several attempts) finds it on a quorum, and
// costs one parallel request and the release of the nodes it took.
const sweepAfter = 3

// noteRefusal records who refused an attempt: the value of the holder whose primary node alone
// refused it, or "" for any other outcome.
func (r *request) noteRefusal(value string) {
	switch {
	case value == "":
		r.refusedBy, r.refusals = "", 0
	case value == r.refusedBy:
		r.refusals++
	default:
		r.refusedBy, r.refusals = value, 1
	}
}

// withContext joins ctx's error and cause, if any, to err.
func withContext(ctx context.Context, err error) error {
	cerr := ctx.Err()
	if cerr == nil {
		return err
	}
	if cause := context.Cause(ctx); cause != cerr {
		return errors.Join(err, cerr, cause)
	}
	return errors.Join(err, cerr)
}

// lateOKs follows the nodes that take the lock after an attempt's outcome was decided. A
// failed attempt releases them, and any late failure too (the node may have taken the lock
// before its reply was lost).
//
// A successful attempt's lock is released on every node. A node whose acquisition had not
// answered when Release sent its release (in flight) may get the two in either order, on two
// connections: if its release reply found the lock, all is done; if it found nothing and the
// acquisition then says it took the lock (or fails, and may have), the node is released
// again. Whichever of the two replies comes second decides.
type lateOKs struct {
	mu      sync.Mutex
	settled bool
	failed  bool
	lock    *Lock // the lock the attempt produced, if it succeeded
	nodes   []int
	gaveUp  atomic.Bool // set when the attempt failed: its requests not sent yet are not
	// The attempt's fanouts, whose requests in flight Release looks for; few holds the first
	// ones (an attempt makes one to five, more while it waits for a leaving holder's release,
	// see ballot.poll).
	fans []*fan
	few  [5]*fan
	// Bit masks of node indexes below 64, from Release on: the nodes whose acquisition was in
	// flight, of those the ones whose release found the lock or did not, and the ones whose
	// acquisition then took the lock or may have.
	releasing                        bool
	inFlight, found, notFound, taken uint64
}

// follow records one of the attempt's fanouts.
func (lo *lateOKs) follow(f *fan) {
	if lo.fans == nil {
		lo.fans = lo.few[:0]
	}
	lo.fans = append(lo.fans, f)
}

// nodeBit returns node's bit in lateOKs' masks; 0 for the nodes past 64, which are not
// followed (their late replies are treated like those that came before the release).
func nodeBit(node int) uint64 {
	if node >= 64 {
		return 0
	}
	return 1 << node
}

// release records that the lock is being released and returns the nodes whose acquisition is
// still in flight, as a bit mask. Nil-safe: a nested hold has none.
func (lo *lateOKs) release() uint64 {
	if lo == nil {
		return 0
	}
	lo.mu.Lock()
	defer lo.mu.Unlock()
	for _, f := range lo.fans {
		f.mu.Lock()
		for k := range f.ops {
			if o := &f.ops[k]; !o.delivered {
				lo.inFlight |= nodeBit(o.node)
			}
		}
		f.mu.Unlock()
	}
	lo.releasing = true
	return lo.inFlight
}

// released records the reply to Release of a node whose acquisition was in flight (n keys
// found ours), and reports whether the node must be released again.
func (lo *lateOKs) released(node int, n int64, err error) bool {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	bit := nodeBit(node)
	if err == nil && n > 0 {
		lo.found |= bit
		return false
	}
	lo.notFound |= bit
	return lo.taken&bit != 0
}

// settle records the attempt's outcome (l nil: it failed) and returns the nodes that said OK
// late until now.
func (lo *lateOKs) settle(l *Lock) []int {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	lo.settled, lo.failed, lo.lock = true, l == nil, l
	return lo.nodes
}

// late reports whether the node of a late reply r must be released now; before the attempt is
// settled it records the node instead. A request that was never sent took nothing.
func (lo *lateOKs) late(r reply) bool {
	if (r.outcome != outcomeOK && r.outcome != outcomeError) || errors.Is(r.err, errNotSent) {
		return false
	}
	lo.mu.Lock()
	defer lo.mu.Unlock()
	switch bit := nodeBit(r.node); {
	case !lo.settled:
		lo.nodes = append(lo.nodes, r.node)
		return false
	case lo.failed:
		return true
	case !lo.releasing || lo.inFlight&bit == 0 || lo.found&bit != 0:
		// Not released yet (Release will ask the node after this reply), or released after
		// this reply came, or the node's release found the lock.
		return false
	default:
		lo.taken |= bit
		return lo.notFound&bit != 0
	}
}

// releaseCall returns the call that releases a late node of the attempt, whose lock keys are
// keys and value value: the lock's release, keeping what its Release kept as a done marker,
// or a failed attempt's.
func (lo *lateOKs) releaseCall(keys []string, value any) *call {
	lo.mu.Lock()
	defer lo.mu.Unlock()
	if lo.lock == nil {
		return unfencedRelease(keys, value)
	}
	lo.lock.mu.Lock()
	keep := lo.lock.keep
	lo.lock.mu.Unlock()
	if keep == "" {
		keep = "0"
	}
	return lo.lock.releaseCall(keep)
}

// attempt makes one attempt at req's lock, the number-th of its acquisition: the nodes are
// polled, then the attempt fails with the quorum out of reach, or wins the lock (see
// ballot.win).
func (c *Client) attempt(ctx context.Context, req *request, number int) (*Lock, error) {
	if req.hold != nil {
		return c.reenter(ctx, req, req.hold, number)
	}
	b := c.newBallot(ctx, req, number)
	err := b.poll()
	b.noteRefusals()
	if err != nil {
		return b.report(nil, err)
	}
	if b.t.ok < c.quorum {
		return b.fail(b.t.reason(ErrNotAcquired), "")
	}
	return b.win()
}

// ballot is one attempt at a lock: the lock value it asks the nodes to take, the nodes'
// replies, and the late replies it follows.
type ballot struct {
	c            *Client
	ctx          context.Context // the acquisition's, for the attempt and its late releases
	req          *request
	number       int
	value        string
	valueArg     any // value, boxed once, for the acquisition and the release
	start        time.Time
	primary      int  // the lock's primary node
	primaryFirst bool // the primary node is asked alone first (contended)
	// leaving: the primary node said yes, and every refusal since named the holder that the
	// primary node alone refused the previous attempt for (request.refusedBy). That holder
	// has left the primary node — its release reached it first, or its lock expired there —
	// and is about to leave the other nodes too.
	leaving bool
	acquire *call
	t       tally
	late    lateOKs
}

// newBallot prepares the number-th attempt of req: a new lock value, and the acquire script's
// call that every node's request shares.
func (c *Client) newBallot(ctx context.Context, req *request, number int) *ballot {
	value := newValue()
	req.making(value)
	b := &ballot{c: c, ctx: ctx, req: req, number: number, value: value, valueArg: value, start: time.Now(),
		primary: c.primary(req.group), t: tally{n: len(c.nodes), quorum: c.quorum}}
	if b.t.oks = b.t.few[:0]; len(c.nodes) > len(b.t.few) {
		b.t.oks = make([]reply, 0, len(c.nodes))
	}
	argv := [...]any{b.valueArg, req.ttlms, c.quarantineMillis, req.labelArg, req.metadata, req.refuse, req.counted, listeningArg}
	args := argv[:len(argv)-1] // ARGV[8] only when listening: absent, it marks nothing
	if req.listening {
		args = argv[:]
	}
	b.acquire = acquireScript.call(req.script, args...) // shared by every node's request
	b.primaryFirst = c.asksPrimaryFirst(req, b.start)
	return b
}

// asksPrimaryFirst reports whether an attempt of req starting at start asks the lock's primary
// node alone first: the lock was contended lately (and no release of a failed attempt is on
// its way to the primary), and neither askEveryNode nor a sweep asks every node.
func (c *Client) asksPrimaryFirst(req *request, start time.Time) bool {
	return !req.every && !req.sweep && len(c.nodes) > 1 && c.contended.is(req.group, start) && !c.unreleased.has(req.group)
}

// poll asks the nodes: the primary node alone first when the lock is contended, and the
// others only if it said yes; else every node at once.
func (b *ballot) poll() error {
	if !b.primaryFirst {
		return b.ask(b.c.all())
	}
	err := b.ask([]int{b.primary})
	rtt := time.Since(b.start)
	if err == nil && b.t.refused == 0 {
		b.leaving = b.t.ok == 1 && b.req.refusedBy != "" // the primary node said yes
		err = b.ask(b.c.others(b.primary))
	}
	// Nobody else can win while we hold the primary node, so nodes that refused are asked
	// again: typically the previous holder's release has not reached them yet (see
	// nextAsk).
	wait, until := rtt, b.start.Add(b.c.nodeTimeout(b.req.ttl))
	for retry := 1; err == nil && b.mayAskRefusedAgain(); retry++ {
		d, ok := b.nextAsk(retry, wait, until)
		if !ok || !ctxsleep.Sleep(b.ctx, d) {
			break
		}
		if b.leaving {
			wait *= 2
		}
		err = b.ask(b.t.takeRefused())
	}
	return err
}

// quickAsks is how many times an attempt that holds the primary node asks the nodes that
// refused it again, one primary round trip apart, whoever refused.
const quickAsks = 3

// nextAsk returns how long to wait before the retry-th ask of the nodes that refused, wait
// being the current step, and whether to ask them at all: up to quickAsks times; and, while
// every refusal names the holder that is leaving (see ballot.leaving), until the attempt's
// start plus the node timeout (until), the step doubling after each ask. The leaving
// holder's release was sent to every node at once, each request bounded by the node timeout,
// so it lands on the other nodes soon after it reached the primary node, which announced it
// — on a loaded host, or behind a slow link, later than a few round trips. Waiting for it
// saves the attempt; the holder of the primary node is the only racer that waits (the others
// were refused by it), and it asks once per doubling of the wait, not once a round trip.
func (b *ballot) nextAsk(retry int, wait time.Duration, until time.Time) (time.Duration, bool) {
	if retry <= quickAsks {
		return wait, true
	}
	left := time.Until(until)
	if !b.leaving || left <= 0 {
		return 0, false
	}
	return min(wait, left), true
}

// mayAskRefusedAgain reports whether the nodes that refused may be asked again: the ballot
// holds nodes but not a quorum, no refuseWhile key refused, and enough nodes are up.
func (b *ballot) mayAskRefusedAgain() bool {
	t := &b.t
	return t.ok > 0 && t.ok < t.quorum && t.refused > 0 && t.refusal == nil && t.quarantined+t.failed <= t.n-t.quorum
}

// ask sends the acquire script to nodes and counts every reply that arrived before it
// returned.
func (b *ballot) ask(nodes []int) error {
	f := &fan{call: b.acquire, replicas: b.req.replicas, gaveUp: &b.late.gaveUp, parse: b.parse, late: b.onLate}
	b.late.follow(f)
	rest, err := b.c.fanout(b.ctx, f, nodes, b.c.nodeTimeout(b.req.ttl), b.count)
	for _, r := range rest {
		b.count(r)
	}
	return err
}

// count counts a node's reply and reports whether the outcome is decided.
func (b *ballot) count(r reply) bool {
	if r.outcome == outcomeRefused && (r.holder == nil || r.holder.Done || r.holder.value != b.req.refusedBy) {
		b.leaving = false
	}
	return b.t.add(b.c, r)
}

func (b *ballot) parse(node int, cmd *redis.Cmd) reply {
	res, err := cmd.Slice()
	if err != nil {
		return reply{node: node, outcome: outcomeError, err: err}
	}
	return parseAcquire(node, b.req, res)
}

// onLate releases the node of a reply that came after the outcome was decided, when it must
// be (see lateOKs).
func (b *ballot) onLate(r reply) {
	if b.late.late(r) {
		b.c.releaseNodes(b.ctx, []int{r.node}, b.late.releaseCall(b.req.lockKeys(), b.valueArg), b.req.ttl, b.primary, b.req.group)
	}
}

// noteRefusals marks the lock contended when a node refused, and records who refused for
// the next attempts (see request.noteRefusal): the holder, if the primary node alone refused.
func (b *ballot) noteRefusals() {
	t := &b.t
	if t.refused > 0 {
		b.c.contended.mark(b.req.group, time.Now())
	}
	if b.primaryFirst && t.ok == 0 && t.refused == 1 && t.holder != nil && !t.holder.Done {
		b.req.noteRefusal(t.holder.value)
	} else {
		b.req.noteRefusal("")
	}
}

// win ends a ballot that has a quorum: the fencing token (and the acquisition count) is
// written back where needed, and the lock is won if validity is left; otherwise the attempt
// fails and the nodes are released.
func (b *ballot) win() (*Lock, error) {
	c, req := b.c, b.req
	until, _ := b.validUntil()
	token, err := c.fence(b.ctx, req, b.t.oks, until)
	if err != nil {
		return b.fail(ErrQuorumUnavailable, err.Error())
	}
	var count uint64
	if req.counter != "" {
		if count, err = c.count(b.ctx, req, b.t.oks, until); err != nil {
			return b.fail(ErrQuorumUnavailable, err.Error())
		}
	}
	validUntil, ok := b.validUntil()
	if !ok {
		return b.fail(ErrQuorumUnavailable, fmt.Sprintf("the nodes answered too slowly: no validity left of TTL %v", req.ttl))
	}
	l := &Lock{
		c: c, keys: req.lockKeys(), releaseKeys: req.release, tokenArg: token, group: req.group, value: b.value, valueArg: b.valueArg, label: req.label,
		ttl: req.ttl, token: token, acquisitions: count, acquiredAt: b.start, valid: &validity{until: validUntil}, replicas: req.replicas,
		late: &b.late,
	}
	b.late.settle(l)
	return b.report(l, nil)
}

// validUntil returns until when a lock won by the ballot is certainly held: its start plus
// the TTL, less the clock drift allowed; and whether that is still to come.
func (b *ballot) validUntil() (time.Time, bool) {
	until := b.start.Add(b.req.ttl - b.c.drift(b.req.ttl))
	return until, time.Now().Before(until)
}

// fail ends a ballot that failed for reason: every node that took the lock, or may have, is
// released, and so are those whose yes comes late.
func (b *ballot) fail(reason error, detail string) (*Lock, error) {
	t := &b.t
	b.late.gaveUp.Store(true)
	nodes := b.late.settle(nil)
	for _, r := range t.oks {
		nodes = append(nodes, r.node)
	}
	for _, e := range t.errs {
		nodes = append(nodes, e.Node)
	}
	b.c.releaseNodes(b.ctx, nodes, unfencedRelease(b.req.lockKeys(), b.valueArg), b.req.ttl, b.primary, b.req.group)
	return b.report(nil, &AcquireError{
		Key: b.req.keys[2], Reason: reason, Holder: t.holder, refusal: t.refusal, Detail: detail,
		OK: t.ok, Refused: t.refused, Quarantined: t.quarantined, Failed: t.failed, Nodes: t.errs,
		own: b.req.own(),
	})
}

// report records the ballot's outcome, the lock l or the error err, as an Attempt (lockseam.OnAttempt)
// and returns them.
func (b *ballot) report(l *Lock, err error) (*Lock, error) {
	t := &b.t
	a := lockseam.Attempt{Number: b.number, PrimaryFirst: b.primaryFirst, Quorum: b.c.quorum,
		OK: t.ok, Refused: t.refused, Quarantined: t.quarantined, Failed: t.failed, Elapsed: time.Since(b.start), Err: err}
	if l != nil {
		a.Validity, a.Token = time.Until(l.ValidUntil()), l.token
	}
	b.req.report(a)
	return l, err
}

// listeningArg is the acquire script's ARGV[8] for an acquisition listening for releases.
var listeningArg any = "1"

// parseAcquire reads the acquire script's reply.
func parseAcquire(node int, req *request, res []any) reply {
	bad := func() reply {
		return reply{node: node, outcome: outcomeError, err: fmt.Errorf("unexpected reply to the acquire script: %v", res)}
	}
	if len(res) < 2 {
		return bad()
	}
	code, _ := res[0].(int64)
	switch code {
	case 0:
		s, _ := res[1].(string)
		token, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return bad()
		}
		var count int64
		if len(res) > 2 {
			count, _ = res[2].(int64)
		}
		return reply{node: node, outcome: outcomeOK, token: token, count: uint64(count)}
	case 1:
		if len(res) < 6 {
			return bad()
		}
		idx, _ := res[1].(int64)
		label, _ := res[2].(string)
		meta, _ := res[3].(string)
		state, _ := res[4].(string)
		pttl, _ := res[5].(int64)
		var value string
		if len(res) > 6 {
			value, _ = res[6].(string)
		}
		key := req.keys[2]
		if k := 2 + int(idx) - 1; idx >= 1 && k < len(req.keys) {
			key = req.keys[k]
		}
		return reply{node: node, outcome: outcomeRefused, holder: &Holder{
			Key: key, Label: label, Metadata: meta, Done: state == "done", TTL: time.Duration(pttl) * time.Millisecond, value: value,
		}}
	case 2:
		ms, _ := res[1].(int64)
		return reply{node: node, outcome: outcomeQuarantined,
			err: fmt.Errorf("in quarantine for %v more: the node lost its memory or is new; on first deployment only, end it with (*redlock.Client).EndQuarantine or cronlock check --end-quarantine", time.Duration(ms)*time.Millisecond)}
	case 3:
		idx, _ := res[1].(int64)
		value, _ := res[2].(string)
		if idx >= 1 && int(idx) <= len(req.refusing) {
			return reply{node: node, outcome: outcomeRefused, refusal: &refusal{key: req.refusing[idx-1], value: value}}
		}
		return bad()
	}
	return bad()
}

// fence returns the fencing token of an acquisition: the highest counter among the quorum's
// replies. When they differ, some node missed acquisitions or lost its memory, so the highest
// is first written back until a quorum holds it, and the next acquisition is sure to see it.
// until is the end of the lock's validity (see raise).
func (c *Client) fence(ctx context.Context, req *request, oks []reply, until time.Time) (uint64, error) {
	var top uint64
	for _, r := range oks {
		top = max(top, r.token)
	}
	atTop := 0
	for _, r := range oks {
		if r.token == top {
			atTop++
		}
	}
	if atTop >= c.quorum { // the common case: nothing to write back, nothing to build
		return top, nil
	}
	have := make([]bool, len(c.nodes))
	for _, r := range oks {
		have[r.node] = r.token == top
	}
	keys := []string{req.fenceKey}
	if boot := req.keys[0]; boot != "" {
		keys = append(keys, boot)
	}
	if err := c.raise(ctx, req, req.fenceKey, have, fenceScript.call(keys, strconv.FormatUint(top, 10), "0"), until); err != nil {
		return 0, fmt.Errorf("fencing token %d %w", top, err)
	}
	return top, nil
}

// count returns the acquisition's number (CountAcquisitions): one more than the highest count
// among the quorum's replies, written back to a quorum before the acquisition succeeds, so
// that the next acquisition on any quorum sees it. Only successful acquisitions write it.
// until is the end of the lock's validity (see raise).
func (c *Client) count(ctx context.Context, req *request, oks []reply, until time.Time) (uint64, error) {
	var top uint64
	for _, r := range oks {
		top = max(top, r.count)
	}
	n := top + 1
	k := fenceScript.call([]string{req.counter}, strconv.FormatUint(n, 10), formatMillis(req.countTTL))
	if err := c.raise(ctx, req, req.counter, make([]bool, len(c.nodes)), k, until); err != nil {
		return 0, fmt.Errorf("acquisition count %d %w", n, err)
	}
	return n, nil
}

// raise sends k, the write-back of a value to the counter key, to every node that does not
// have it yet (have, fewer than a quorum), until a quorum has it. The nodes whose request
// failed (no reply: it may have landed or not) are asked again, at most maxRaises times in
// all, while a node timeout and another are left before until, the end of the lock's
// validity: the write is idempotent, and the lock keeps every other writer of this counter
// away meanwhile. Giving up would leave the value on the nodes it reached, and a count
// counted for an acquisition that failed (which, where it bounds a tick's attempts, could
// leave the tick to nobody).
func (c *Client) raise(ctx context.Context, req *request, key string, have []bool, k *call, until time.Time) error {
	t := tally{n: len(c.nodes), quorum: c.quorum}
	need := make([]int, 0, len(c.nodes))
	for i, ok := range have {
		if ok {
			t.ok++
		} else {
			need = append(need, i)
		}
	}
	timeout := c.nodeTimeout(req.ttl)
	for round := 1; ; round++ {
		var failed []int
		f := &fan{call: k, replicas: req.replicas, parse: parseRaise}
		_, err := c.fanout(ctx, f, need, timeout, func(r reply) bool {
			if r.outcome == outcomeError {
				failed = append(failed, r.node)
			}
			return t.add(c, r)
		})
		switch {
		case err != nil:
			return err
		case t.ok >= c.quorum:
			return nil
		case round == maxRaises || t.ok+len(failed) < c.quorum || time.Until(until) < 2*timeout:
			return fmt.Errorf("could not be written back to a quorum (%s): %w", key, errors.Join(asErrors(t.errs)...))
		}
		need, t.failed, t.errs = failed, 0, nil
	}
}

// maxRaises bounds the requests of a write-back to a node whose requests fail (raise).
const maxRaises = 3

// parseRaise reads a node's reply to a write-back of a counter (fence.lua).
func parseRaise(i int, cmd *redis.Cmd) reply {
	written, err := cmd.Int64()
	switch {
	case err != nil:
		return reply{node: i, outcome: outcomeError, err: err}
	case written == 0:
		return reply{node: i, outcome: outcomeQuarantined, err: errors.New("in quarantine: the counter is not written")}
	}
	return reply{node: i, outcome: outcomeOK}
}

func asErrors(nodes []*NodeError) []error {
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		errs[i] = n
	}
	return errs
}

// all returns the indexes of every node. The slice is shared: do not modify it.
func (c *Client) all() []int { return c.allNodes }

// others returns the indexes of every node but one, in a new slice.
func (c *Client) others(but int) []int {
	return slices.DeleteFunc(slices.Clone(c.allNodes), func(i int) bool { return i == but })
}

// releaseNodes releases the nodes of an attempt that failed, or that took its lock after the
// attempt was decided, without waiting for them: misses are retried in the background, and
// replies still in flight are released by the attempt's late replies. Until the release
// reached the group's primary node (if among them), the group counts as unreleased.
func (c *Client) releaseNodes(ctx context.Context, nodes []int, k *call, ttl time.Duration, primary int, group string) {
	if len(nodes) == 0 {
		return
	}
	if !slices.Contains(nodes, primary) {
		group = ""
	} else {
		c.unreleased.add(group, 1)
	}
	f := c.releaseFan(k, ttl, primary, group)
	_, _ = c.fanout(context.WithoutCancel(ctx), f, nodes, c.nodeTimeout(ttl), nil)
}
