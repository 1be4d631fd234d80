package scheduler

import (
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/robfig/cron/v3"
)

// parser reads cron specs: seconds optional, descriptors allowed.
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// specExamples ends every spec error.
const specExamples = `e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`

// specError says what is wrong with a spec: the error of ParseSpec and resolveSpec, which Add
// words as the problem of a job.InvalidError of the field Spec.
type specError struct {
	spec    string
	problem string
	err     error // the parser's error, if any
}

func (e *specError) Error() string {
	return fmt.Sprintf("spec %q: %s; %s", e.spec, e.problem, specExamples)
}

// Unwrap returns the parser's error.
func (e *specError) Unwrap() error { return e.err }

// ParseSpec parses a job's spec into the schedule of its ticks, in loc unless the spec starts
// with "CRON_TZ=Zone " (or "TZ=Zone "). A nil loc means UTC. It accepts
//
//   - cron specs with 5 fields (minute hour day-of-month month day-of-week) or 6 (seconds
//     first), with names (jan, mon), ranges, lists and steps: "*/5 * * * *", "0 30 9 * * 1-5";
//   - descriptors: @yearly (@annually), @monthly, @weekly, @daily (@midnight), @hourly;
//   - "@every d" with a Go duration d of at least 1ms, in whole milliseconds: ticks at every
//     multiple of d since the Unix epoch, so every replica computes the same instants
//     whenever it started (robfig/cron's @every counts from process start instead).
//
// Daylight saving time, for cron specs and descriptors: a spec that fires every hour (its
// hour field is "*") follows real time — in a repeated hour it fires in both passes (two
// different instants), and a skipped hour simply has no ticks, so its spacing in real time is
// unchanged. A spec with fixed hours follows the wall clock: a time in a skipped hour fires
// once, at the transition (e.g. 02:30 fires at 03:00 when clocks go from 02:00 to 03:00), and
// a time in a repeated hour fires once, at its first occurrence.
//
// Its error quotes the spec, says what is wrong with it (naming the field of a cron spec) and
// gives examples of valid specs; it wraps the cron parser's or time package's error, if any.
func ParseSpec(spec string, loc *time.Location) (cron.Schedule, error) {
	if loc == nil {
		loc = time.UTC
	}
	bad := func(err error, format string, args ...any) (cron.Schedule, error) {
		return nil, &specError{spec: spec, problem: fmt.Sprintf(format, args...), err: err}
	}
	s := strings.TrimSpace(spec)
	if s == "" {
		return bad(nil, "is empty")
	}
	if strings.HasPrefix(s, "CRON_TZ=") || strings.HasPrefix(s, "TZ=") {
		rest := s[strings.IndexByte(s, '=')+1:]
		i := strings.IndexFunc(rest, unicode.IsSpace)
		if i < 0 {
			return bad(nil, "has a time zone but no schedule after it")
		}
		name := rest[:i]
		l, err := time.LoadLocation(name)
		if err != nil {
			return bad(err, "time zone %q is unknown (%v): use an IANA name such as Europe/Paris or UTC", name, err)
		}
		loc, s = l, strings.TrimSpace(rest[i:])
	}
	if f := strings.Fields(s); f[0] == "@every" {
		if len(f) != 2 {
			return bad(nil, `@every takes one duration, e.g. "@every 10s"`)
		}
		d, err := time.ParseDuration(f[1])
		if err != nil {
			return bad(err, "@every: %q is not a duration (%v): write it like 10s, 1m30s, 250ms", f[1], err)
		}
		if d < time.Millisecond || d%time.Millisecond != 0 {
			return bad(nil, "@every %v: the interval must be at least 1ms, in whole milliseconds", d)
		}
		return everySchedule{interval: d}, nil
	}
	sched, err := parser.Parse(s)
	if err != nil {
		return bad(err, "%s", explain(s, err))
	}
	ss, ok := sched.(*cron.SpecSchedule)
	if !ok {
		return bad(nil, "unexpected schedule type %T", sched)
	}
	return newWallSchedule(ss, loc), nil
}

// fieldNames names the fields of a 6-field spec.
var fieldNames = []string{"second", "minute", "hour", "day of month", "month", "day of week"}

var fieldParsers = []cron.Parser{
	cron.NewParser(cron.Second), cron.NewParser(cron.Minute), cron.NewParser(cron.Hour),
	cron.NewParser(cron.Dom), cron.NewParser(cron.Month), cron.NewParser(cron.Dow),
}

// explain says which field of a spec the parser refused, when it can tell.
func explain(s string, err error) string {
	f := strings.Fields(s)
	if strings.HasPrefix(s, "@") {
		return fmt.Sprintf("unknown descriptor %q: use @yearly, @monthly, @weekly, @daily, @hourly or @every <duration>", f[0])
	}
	if len(f) != 5 && len(f) != 6 {
		return fmt.Sprintf("has %d fields: give 5 (minute hour day-of-month month day-of-week) or 6 (with seconds first)", len(f))
	}
	first := 1
	if len(f) == 6 {
		first = 0
	}
	for i, field := range f {
		k := first + i
		if _, ferr := fieldParsers[k].Parse(field); ferr != nil {
			msg := strings.TrimSuffix(ferr.Error(), ": "+field) // robfig repeats the field
			return fmt.Sprintf("field %d (%s) %q: %s", i+1, fieldNames[k], field, msg)
		}
	}
	return err.Error()
}

// everySchedule is the schedule of "@every d": every multiple of d since the Unix epoch.
type everySchedule struct{ interval time.Duration }

// Next returns the first multiple of the interval after t.
func (e everySchedule) Next(t time.Time) time.Time {
	d := int64(e.interval)
	n := t.UnixNano()
	k := n / d
	if n < 0 && n%d != 0 {
		k-- // floor for instants before the epoch
	}
	return time.Unix(0, (k+1)*d).In(t.Location())
}

// wallSchedule applies the DST rules of ParseSpec to a robfig/cron SpecSchedule.
type wallSchedule struct {
	real   cron.SpecSchedule // the spec in loc, stepping in real time (robfig's own behaviour)
	wall   cron.SpecSchedule // the spec in UTC, applied to wall-clock times of loc
	loc    *time.Location
	hourly bool // fires every hour: follows real time
	fixed  bool // loc is UTC: wall time is real time
}

func newWallSchedule(ss *cron.SpecSchedule, loc *time.Location) *wallSchedule {
	const allHours = 1<<24 - 1
	w := &wallSchedule{real: *ss, wall: *ss, loc: loc, hourly: ss.Hour&allHours == allHours}
	w.real.Location = loc
	w.wall.Location = time.UTC
	w.fixed = loc == time.UTC
	return w
}

// maxSteps bounds the search for the next tick: a fixed-hour spec in the second pass of a
// repeated hour skips at most one hour of wall-clock matches (3600 with seconds).
const maxSteps = 10000

// Next returns the first tick after t, in the schedule's location, or the zero time if there
// is none within five years.
func (w *wallSchedule) Next(t time.Time) time.Time {
	if w.fixed || w.hourly {
		n := t
		for range 3 { // robfig's DST handling of day fields may step back; never return ≤ t
			n = w.real.Next(n)
			if n.IsZero() || n.After(t) {
				return n
			}
			n = t.Add(time.Second)
		}
		return time.Time{}
	}
	after := t
	wt := floating(t.In(w.loc))
	for range maxSteps {
		wt = w.wall.Next(wt)
		if wt.IsZero() {
			return time.Time{}
		}
		cands := w.instants(wt)
		if len(cands) == 0 { // a skipped hour: fire at the transition
			if tr := w.transition(wt); tr.After(after) {
				return tr
			}
			continue
		}
		if c := cands[0]; c.After(after) { // a repeated hour: the first occurrence only
			return c
		}
	}
	return time.Time{}
}

// floating returns the wall-clock fields of t as a UTC time.
func floating(t time.Time) time.Time {
	y, mo, d := t.Date()
	h, mi, s := t.Clock()
	return time.Date(y, mo, d, h, mi, s, t.Nanosecond(), time.UTC)
}

// offsets returns the UTC offsets of loc around the wall time wt: the zone in effect near it,
// and the zones before and after that one.
func (w *wallSchedule) offsets(wt time.Time) []int {
	approx := time.Date(wt.Year(), wt.Month(), wt.Day(), wt.Hour(), wt.Minute(), wt.Second(), wt.Nanosecond(), w.loc)
	_, o := approx.Zone()
	offs := []int{o}
	start, end := approx.ZoneBounds()
	if !start.IsZero() {
		_, ob := start.Add(-time.Nanosecond).Zone()
		offs = append(offs, ob)
	}
	if !end.IsZero() {
		_, oa := end.Zone()
		offs = append(offs, oa)
	}
	return offs
}

// instants returns, in order, the instants whose wall-clock time in loc is wt: none in a
// skipped hour, two in a repeated hour.
func (w *wallSchedule) instants(wt time.Time) []time.Time {
	var out []time.Time
	for _, o := range w.offsets(wt) {
		x := time.Unix(wt.Unix()-int64(o), int64(wt.Nanosecond())).In(w.loc)
		if !floating(x).Equal(wt) {
			continue
		}
		dup := false
		for _, y := range out {
			dup = dup || y.Equal(x)
		}
		if !dup {
			out = append(out, x)
		}
	}
	if len(out) == 2 && out[1].Before(out[0]) {
		out[0], out[1] = out[1], out[0]
	}
	return out
}

// transition returns the instant at which the clock skipped over the wall time wt.
func (w *wallSchedule) transition(wt time.Time) time.Time {
	var lo, hi time.Time
	for _, o := range w.offsets(wt) {
		x := time.Unix(wt.Unix()-int64(o), int64(wt.Nanosecond())).In(w.loc)
		if lo.IsZero() || x.Before(lo) {
			lo = x
		}
		if hi.IsZero() || x.After(hi) {
			hi = x
		}
	}
	if start, _ := hi.ZoneBounds(); start.After(lo) && !start.After(hi) {
		return start.In(w.loc)
	}
	return hi
}
