package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/internal/outcome"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/middleware"
)

// Scripts of the queue of manual runs (layout.TriggersKey): a sorted set of
// "<id> <job> <by>" members (by: who asked, see WithOperator; it may hold spaces, an id and a
// job name cannot) scored by the Unix milliseconds they were asked at.
var (
	// Adds the request, and announces it on the channel ARGV[3] (layout.TriggersChannel; a
	// hint: replicas poll too).
	enqueueScript = redis.NewScript(`
local n = redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return n`)
	// Drops the requests asked for before ARGV[1] (ms), whose window has closed, and returns
	// the others with their scores.
	pendingScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1])
return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')`)
	dequeueScript = redis.NewScript(`return redis.call('ZREM', KEYS[1], ARGV[1])`)
)

// Trigger asks for one manual run of the job named name, now, and returns its id. The run
// happens once across the cluster: some running replica with the job starts it — the
// Scheduler whose Control c is (if any) at once, the others when the nodes announce it
// (Pub/Sub), or at their next look at the queue (every second) — under the lock key
// {prefix:job}:trigger:<id> instead of a tick key, with job.Run.Trigger set to the id (and
// Tick to when it was asked) and job.Run.By to who asked: the operator named by ctx
// (WithOperator), else c's replica (WithReplica). The job's Overlap applies: with Forbid, the run waits until no other run of the job is running. A
// pause does not stop it, and it is not retried: its lock is kept as done whatever the
// outcome. A request that no replica could start within the tick retention minus twice the
// max clock skew is dropped.
//
// The request is written to every lock node and a quorum must confirm. It returns an error
// matching ErrUnknownJob if c is a Scheduler's Control and the job is not registered there,
// and one matching redlock.ErrQuorumUnavailable if a quorum did not confirm (the run may
// still happen).
func (c *Control) Trigger(ctx context.Context, name string) (string, error) {
	if err := c.known(name); err != nil {
		return "", err
	}
	by, err := operator(ctx, c.cfg.replica)
	if err != nil {
		return "", fmt.Errorf("scheduler: trigger %q: %w", name, err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails
	asked := c.cfg.clock.Now().UnixMilli()
	id := strconv.FormatInt(asked, 10) + "-" + hex.EncodeToString(b[:])
	_, err = lockseam.Broadcast(c.locks, ctx, enqueueScript, []string{layout.TriggersKey(c.cfg.prefix)}, asked, id+" "+name+" "+by, layout.TriggersChannel(c.cfg.prefix))
	if err != nil {
		return "", fmt.Errorf("scheduler: trigger %q: %w", name, err)
	}
	if c.sched != nil {
		select { // look at once, so that this replica starts it if it is running
		case c.sched.pollNow <- struct{}{}:
		default:
		}
	}
	return id, nil
}

// pollTriggers starts the pending manual runs until Stop: when the nodes announce one, when
// Trigger is called here, and every poll interval. It also stops the runs here that a newer
// tick asked to stop, when the nodes announce a replacement (Overlap Replace). Stop ends its
// requests to the nodes.
func (s *Scheduler) pollTriggers() {
	defer close(s.pollDone)
	ctx := s.stopping // its requests end with Stop
	asked := lockseam.Subscribe(s.locks, ctx, layout.TriggersChannel(s.cfg.prefix))
	defer asked.Close()
	replacing := lockseam.Subscribe(s.locks, ctx, layout.ReplaceChannel(s.cfg.prefix))
	defer replacing.Close()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-replacing.C():
			s.stopReplaced(ctx)
			continue
		case <-t.C:
		case <-s.pollNow:
			t.Stop()
		case <-asked.C():
			t.Stop()
		}
		s.startTriggers(ctx)
		t.Reset(s.cfg.triggerPoll)
	}
}

// stopReplaced looks whether a newer tick asked one of the runs under way here to stop — its
// lock was revoked (redlock.Revoke), which a renewal tells — and cancels each such run's
// context with a cause matching job.ErrReplaced. A run not stopped here, because the
// announcement did not arrive, is stopped by its own lease at its next renewal.
func (s *Scheduler) stopReplaced(ctx context.Context) {
	s.mu.Lock()
	var runs []*recorder
	for rec := range s.active {
		if e := s.entries[rec.run.Job]; e != nil && e.job.Overlap != job.Allow && rec.phase() == phaseRunning && rec.lease != nil {
			runs = append(runs, rec)
		}
	}
	s.mu.Unlock()
	for _, rec := range runs {
		if _, err := rec.lease.Lock().Extend(ctx); errors.Is(err, lockseam.ErrRevoked) {
			rec.cancel(fmt.Errorf("%w: %w", job.ErrReplaced, err))
		}
	}
}

// window is how long after it was asked for a manual run may start: as long as a tick.
func (s *Scheduler) window() time.Duration { return s.cfg.retention - 2*s.cfg.maxSkew }

// startTriggers reads the queue from every node that answers and starts each request that is
// not running here yet.
func (s *Scheduler) startTriggers(ctx context.Context) {
	now := s.cfg.clock.Now()
	replies, _ := lockseam.Broadcast(s.locks, ctx, pendingScript, []string{layout.TriggersKey(s.cfg.prefix)},
		now.Add(-s.window()).UnixMilli())
	asked := map[string]int64{}
	for _, r := range replies {
		list, _ := r.([]any)
		for i := 0; i+1 < len(list); i += 2 {
			member, _ := list[i].(string)
			score, _ := list[i+1].(string)
			ms, err := strconv.ParseInt(score, 10, 64)
			if err == nil {
				asked[member] = ms
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != running {
		return
	}
	for member, ms := range asked {
		id, rest, ok := strings.Cut(member, " ")
		name, by, _ := strings.Cut(rest, " ")
		e := s.entries[name]
		if !ok || e == nil || s.triggered[member] {
			continue // a job this replica does not have, or a run of it that is under way here
		}
		at := time.UnixMilli(ms)
		run := &job.Run{Job: name, Tick: at, PlannedStart: at, Trigger: id, By: by, Attempt: 1, Replica: s.cfg.replica, Deadline: at.Add(s.window())}
		s.triggered[member] = true
		s.goRun(e, run, func(err error) {
			switch middleware.Outcome(err) {
			case outcome.SkippedOverlap, outcome.SkippedHeld, outcome.QuorumUnavailable, outcome.Stopped:
				// Not run yet (or run elsewhere, whose replica dequeues it): look again later.
			default:
				_, _ = lockseam.Broadcast(s.locks, context.Background(), dequeueScript, []string{layout.TriggersKey(s.cfg.prefix)}, member)
			}
			s.mu.Lock()
			delete(s.triggered, member)
			s.mu.Unlock()
		})
	}
}
