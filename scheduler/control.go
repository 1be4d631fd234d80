package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/internal/lockseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/redlock"
)

// Scripts of the control state kept on the lock nodes (see Control.Pause).
var (
	setScript = redis.NewScript(`return redis.call('SET', KEYS[1], ARGV[1])`)
	delScript = redis.NewScript(`return redis.call('DEL', KEYS[1])`)
)

// known returns an error matching ErrUnknownJob unless a job named name is registered.
func (s *Scheduler) known(name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.entries[name] == nil {
		return fmt.Errorf("%w: %q", ErrUnknownJob, name)
	}
	return nil
}

// Control pauses, resumes, triggers and reads the history and status of jobs by name, and
// lists the replicas (Replicas), on the lock nodes, without running them: an admin tool's view
// of a cluster of schedulers. One made by NewControl needs no handlers, and knows no job list:
// a name that no scheduler runs is paused or triggered for nothing. Give it the options of the
// schedulers it controls that matter to it (WithPrefix, WithMaxClockSkew, WithClock;
// WithReplica and WithLogger for its own log lines); NewControl refuses the others.
//
// A Scheduler's Control (Scheduler.Control) has the scheduler's options, and knows its jobs:
// its Pause, Resume, Trigger, History, HistoryWithOutput and Status refuse a job that is not
// registered with the scheduler, with an error matching ErrUnknownJob, before doing anything;
// its Status includes the job's Entry; and its Trigger has the scheduler, if it is running,
// look at the queue of manual runs at once. Its other methods do what a NewControl's do.
//
// Its methods are safe for concurrent use.
type Control struct {
	locks *redlock.Client
	cfg   config
	sched *Scheduler // the scheduler of Scheduler.Control, whose jobs it knows; nil for NewControl's
}

// Control returns the scheduler's Control, with its options and its jobs: see Control. It is
// the same for every call.
func (s *Scheduler) Control() *Control { return s.ctl }

// known returns an error matching ErrUnknownJob if c is a Scheduler's Control and no job named
// name is registered with that scheduler.
func (c *Control) known(name string) error {
	if c.sched == nil {
		return nil
	}
	return c.sched.known(name)
}

// NewControl returns a Control over the lock nodes of locks, with the options of the
// schedulers it controls that matter to it: WithPrefix, WithMaxClockSkew, WithClock,
// WithReplica and WithLogger. Any other option is an error naming it, since a Control runs no
// jobs and would ignore it.
func NewControl(locks *redlock.Client, opts ...Option) (*Control, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if unused := cfg.notForControl(); len(unused) > 0 {
		return nil, fmt.Errorf("scheduler: NewControl: a Control runs no jobs and would ignore %s: drop it (a Control takes WithPrefix, WithMaxClockSkew, WithClock, WithReplica and WithLogger)",
			strings.Join(unused, ", "))
	}
	return newControl(locks, cfg)
}

// newControl returns a Control over the lock nodes of locks with cfg.
func newControl(locks *redlock.Client, cfg config) (*Control, error) {
	if locks == nil {
		return nil, errors.New("scheduler: the redlock client is nil: give one made by redlock.New over the lock nodes")
	}
	return &Control{locks: locks, cfg: cfg}, nil
}

// Pause pauses the job named name cluster-wide: from the next tick on, every replica skips
// its ticks (outcome skipped_paused, with reason in the logs, spans and metrics), until
// Resume. The pause is the job's layout.PauseKey, written to every lock node and
// confirmed by a quorum; each tick's own acquisition is refused while it is there, so honouring
// it costs no extra request, and it holds while a minority of nodes is down. A run under way
// is not stopped. Pausing a paused job replaces its reason. The pause records who paused it
// (job.Pause.By): the operator named by ctx (WithOperator), else this replica.
//
// It returns an error matching ErrUnknownJob if c is a Scheduler's Control and no job of that
// name is registered there, and one matching redlock.ErrQuorumUnavailable if a quorum did not
// confirm (the pause may then be on some nodes: try again, or Resume).
func (c *Control) Pause(ctx context.Context, name, reason string) error {
	if err := c.known(name); err != nil {
		return err
	}
	if strings.TrimSpace(reason) == "" {
		return fmt.Errorf("scheduler: pause %q: the reason is empty: say why, e.g. %q; it is shown in every skipped tick", name, "database migration")
	}
	by, err := operator(ctx, c.cfg.replica)
	if err != nil {
		return fmt.Errorf("scheduler: pause %q: %w", name, err)
	}
	p := job.Pause{Reason: reason, Since: c.cfg.clock.Now(), By: by}
	if _, err := lockseam.Broadcast(c.locks, ctx, setScript, []string{layout.PauseKey(c.cfg.prefix, name)}, layout.PauseValue(p)); err != nil {
		return fmt.Errorf("scheduler: pause %q: %w", name, err)
	}
	c.cfg.logger.Info("cronlock: job paused", "job", name, "reason", reason, "by", by, "replica", c.cfg.replica)
	return nil
}

// Resume ends the pause of the job named name: its next tick runs as usual. Resuming a job
// that is not paused does nothing. The pause key is deleted from every lock node that answers,
// and a quorum must confirm; a node that was down keeps its copy, which refuses nothing while
// the other nodes are up, until a later Resume reaches it (Resume may be repeated).
//
// Its errors are those of Pause.
func (c *Control) Resume(ctx context.Context, name string) error {
	if err := c.known(name); err != nil {
		return err
	}
	by, err := operator(ctx, c.cfg.replica)
	if err != nil {
		return fmt.Errorf("scheduler: resume %q: %w", name, err)
	}
	if _, err := lockseam.Broadcast(c.locks, ctx, delScript, []string{layout.PauseKey(c.cfg.prefix, name)}); err != nil {
		return fmt.Errorf("scheduler: resume %q: %w", name, err)
	}
	c.cfg.logger.Info("cronlock: job resumed", "job", name, "by", by, "replica", c.cfg.replica)
	return nil
}
