// Package clocktest provides clocks for tests of the scheduler and middleware: a fake clock
// that moves only when the test says so, and an offset clock (the real clock shifted by a
// fixed amount, or by an amount that can be stepped while it runs) to skew one replica against
// the others.
//
// Both implement middleware.Clock (scheduler.WithClock).
package clocktest

import (
	"context"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cronlock/cronlock/middleware"
)

// Fake is a clock that moves only when Advance or Set is called. Timers fire, in order of
// their deadlines, from the goroutine that moves the clock; their channels have a buffer of
// one, like time.Timer's, so firing never blocks. It is safe for concurrent use.
//
// BlockUntil lets a test wait until the code under test is waiting on timers, so tests need no
// sleeps: advance the clock only once the loop is blocked.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer // active: created, not yet fired or stopped
	changed chan struct{}
}

var _ middleware.Clock = (*Fake)(nil)

// NewFake returns a fake clock set to now.
func NewFake(now time.Time) *Fake {
	return &Fake{now: now, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires when the clock reaches Now()+d; at once if d ≤ 0.
func (f *Fake) NewTimer(d time.Duration) middleware.Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{f: f, at: f.now.Add(d), c: make(chan time.Time, 1)}
	if d <= 0 {
		t.c <- f.now
		return t
	}
	f.timers = append(f.timers, t)
	f.notify()
	return t
}

// Advance moves the clock forward by d and fires the timers that are due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the clock to t (forward or backward) and fires the timers that are due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

func (f *Fake) setLocked(t time.Time) {
	f.now = t
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, tm := range f.timers {
		if tm.at.After(t) {
			kept = append(kept, tm)
			continue
		}
		tm.c <- t
	}
	clear(f.timers[len(kept):])
	f.timers = kept
	f.notify()
}

// Timers returns the number of active timers: created, and neither fired nor stopped.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDeadline returns the earliest deadline of the active timers, and false if there are none.
func (f *Fake) NextDeadline() (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.timers) == 0 {
		return time.Time{}, false
	}
	min := f.timers[0].at
	for _, t := range f.timers[1:] {
		if t.at.Before(min) {
			min = t.at
		}
	}
	return min, true
}

// BlockUntil waits until at least n timers are active, or ctx ends (then it returns ctx's
// error).
func (f *Fake) BlockUntil(ctx context.Context, n int) error {
	return f.waitFor(ctx, func() bool { return len(f.timers) >= n })
}

// BlockUntilDue waits until a timer whose deadline is not after t is active, or ctx ends (then
// it returns ctx's error).
func (f *Fake) BlockUntilDue(ctx context.Context, t time.Time) error {
	return f.waitFor(ctx, func() bool {
		return slices.ContainsFunc(f.timers, func(tm *fakeTimer) bool { return !tm.at.After(t) })
	})
}

// waitFor waits until cond, called with f.mu held, is true, or ctx ends.
func (f *Fake) waitFor(ctx context.Context, cond func() bool) error {
	for {
		f.mu.Lock()
		ok, ch := cond(), f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// notify wakes BlockUntil callers; f.mu must be held.
func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

type fakeTimer struct {
	f  *Fake
	at time.Time
	c  chan time.Time
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	f := t.f
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, tm := range f.timers {
		if tm == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			f.notify()
			return true
		}
	}
	return false
}

// Offset returns the real clock shifted by d: Now is time.Now().Add(d), and timers are real
// timers. It models a replica whose wall clock is off by d. Go reads the clock through the
// vDSO, so faketime cannot skew a Go process; inject this clock instead.
func Offset(d time.Duration) middleware.Clock { return NewShifted(d) }

// Shifted is the real clock shifted by an offset that can change while it is in use, which
// models a wall clock that is stepped (by NTP or an operator) under a running process: Now is
// time.Now() plus the current offset, and timers are real timers, so a step changes what Now
// says but not when pending timers fire. It is safe for concurrent use.
type Shifted struct{ d atomic.Int64 }

var _ middleware.Clock = (*Shifted)(nil)

// NewShifted returns the real clock shifted by d.
func NewShifted(d time.Duration) *Shifted {
	c := &Shifted{}
	c.d.Store(int64(d))
	return c
}

// Set steps the clock: from now on Now is time.Now().Add(d).
func (c *Shifted) Set(d time.Duration) { c.d.Store(int64(d)) }

// Now returns the real time shifted by the current offset.
func (c *Shifted) Now() time.Time { return time.Now().Add(time.Duration(c.d.Load())) }

// NewTimer returns a real timer.
func (c *Shifted) NewTimer(d time.Duration) middleware.Timer {
	return middleware.SystemClock().NewTimer(d)
}
