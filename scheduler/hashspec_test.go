package scheduler_test

// Pure logic: ResolveSpec and JitterDelay are functions of their arguments; no nodes needed.

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/scheduler"
)

// H spreads 100 job names across each field's range, never outside it (days of the month
// within 1-28, which every month has), and every resolved spec parses.
func TestResolveSpecSpreadsNames(t *testing.T) {
	fields := []struct {
		name    string
		lo, hi  int
		atLeast int // distinct values among 100 names
	}{
		{"second", 0, 59, 35}, {"minute", 0, 59, 35}, {"hour", 0, 23, 18},
		{"day of month", 1, 28, 20}, {"month", 1, 12, 10}, {"day of week", 0, 6, 7},
	}
	seen := make([]map[int]bool, len(fields))
	for i := range seen {
		seen[i] = map[int]bool{}
	}
	for n := range 100 {
		name := fmt.Sprintf("job-%d", n)
		spec, err := schedseam.ResolveSpec("H H H H H H", name)
		require.NoError(t, err, name)
		_, err = scheduler.ParseSpec(spec, nil)
		require.NoError(t, err, "%s: %q parses", name, spec)
		for i, f := range strings.Fields(spec) {
			v, err := strconv.Atoi(f)
			require.NoError(t, err, "%s: %q: field %d is one value", name, spec, i+1)
			require.True(t, v >= fields[i].lo && v <= fields[i].hi, "%s: %q: %s %d outside %d-%d", name, spec, fields[i].name, v, fields[i].lo, fields[i].hi)
			seen[i][v] = true
		}
	}
	for i, f := range fields {
		assert.GreaterOrEqual(t, len(seen[i]), f.atLeast, "%s: 100 names take %d distinct values of %d-%d", f.name, len(seen[i]), f.lo, f.hi)
	}
}

// The hash is fixed: the same on every call (every replica, every restart), and pinned here for
// two names, so that a change of hash — which would move every user's H jobs and jitter delays
// — fails this test and has to be made on purpose.
func TestResolveSpecIsPinned(t *testing.T) {
	for _, tc := range []struct{ name, spec, want string }{
		{"backup", "H H * * *", "33 14 * * *"},
		{"backup", "H/15 * * * *", "3-59/15 * * * *"},
		{"backup", "H H(0-7) H * H/2", "33 6 24 * 0-6/2"},
		{"report-daily", "H H * * *", "13 9 * * *"},
		{"report-daily", "0 H(9-17)/2 * * 1-5", "0 10-17/2 * * 1-5"},
	} {
		got, err := schedseam.ResolveSpec(tc.spec, tc.name)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%s %q", tc.name, tc.spec)
		again, _ := schedseam.ResolveSpec(tc.spec, tc.name)
		assert.Equal(t, got, again, "deterministic")
	}
	tick := time.Unix(1767225600, 0) // 2026-01-01T00:00:00Z
	assert.Equal(t, 109006*time.Millisecond, tickmath.JitterDelay("backup", tick, 10*time.Minute), "JitterDelay is pinned too")
	assert.Equal(t, tickmath.JitterDelay("backup", tick, 10*time.Minute), tickmath.JitterDelay("backup", tick, 10*time.Minute))
	assert.Zero(t, tickmath.JitterDelay("backup", tick, 0))
}

// Every form: H, H(a-b), H/n, H(a-b)/n, H in a list, beside names and a time zone; specs
// without H are returned as they are.
func TestResolveSpecForms(t *testing.T) {
	const name = "forms"
	in := func(t *testing.T, spec string, field int, check func(v string) bool) {
		t.Helper()
		got, err := schedseam.ResolveSpec(spec, name)
		require.NoError(t, err, spec)
		_, err = scheduler.ParseSpec(got, nil)
		require.NoError(t, err, "%q resolves to %q, which parses", spec, got)
		f := strings.Fields(strings.TrimPrefix(got, "CRON_TZ=Europe/Paris "))
		assert.True(t, check(f[field]), "%q → %q: field %d is %q", spec, got, field+1, f[field])
	}
	between := func(lo, hi int) func(string) bool {
		return func(v string) bool { n, err := strconv.Atoi(v); return err == nil && n >= lo && n <= hi }
	}
	stepped := func(lo, hi, step int) func(string) bool { // "o-hi/step", o in [lo, lo+step)
		return func(v string) bool {
			var o, h, s int
			_, err := fmt.Sscanf(v, "%d-%d/%d", &o, &h, &s)
			return err == nil && o >= lo && o < lo+step && h == hi && s == step
		}
	}
	in(t, "H * * * *", 0, between(0, 59))
	in(t, "0 H(9-17) * * *", 1, between(9, 17))
	in(t, "H/15 * * * *", 0, stepped(0, 59, 15))
	in(t, "0 H(8-20)/4 * * *", 1, stepped(8, 20, 4))
	in(t, "H/10 * * * * *", 0, stepped(0, 59, 10)) // seconds
	in(t, "0 0 H/7 * *", 2, stepped(1, 28, 7))     // a plain H day is one every month has
	in(t, "0 0 H(1-31) * *", 2, between(1, 31))    // a range given is used as it is
	in(t, "0 0 * * H", 4, between(0, 6))
	in(t, "0 0 * H mon", 3, between(1, 12))
	in(t, "CRON_TZ=Europe/Paris H 9 * * *", 0, between(0, 59))
	in(t, "0,H(30-40),50 * * * *", 0, func(v string) bool {
		p := strings.Split(v, ",")
		return len(p) == 3 && p[0] == "0" && between(30, 40)(p[1]) && p[2] == "50"
	})
	in(t, "H(5-5) * * * *", 0, func(v string) bool { return v == "5" })
	for _, spec := range []string{"*/5 * * * *", "0 9 * * THU", "@hourly", "@every 10s", "CRON_TZ=Asia/Ho_Chi_Minh 0 9 * * *"} {
		got, err := schedseam.ResolveSpec(spec, name)
		require.NoError(t, err)
		assert.Equal(t, spec, got, "no H: unchanged")
	}
}

// Each malformed H is refused with an error naming the field and the fix.
func TestResolveSpecRefusesMalformedH(t *testing.T) {
	for _, tc := range []struct{ spec, field, want string }{
		{"H( * * * *", `field 1 (minute) "H("`, "no closing parenthesis"},
		{"H(5) * * * *", `field 1 (minute) "H(5)"`, "two numbers"},
		{"H(a-9) * * * *", `field 1 (minute) "H(a-9)"`, "two numbers"},
		{"0 H(10-5) * * *", `field 2 (hour) "H(10-5)"`, "must go up and stay within 0-23"},
		{"0 H(0-24) * * *", `field 2 (hour) "H(0-24)"`, "within 0-23"},
		{"0 0 H(0-9) * *", `field 3 (day of month) "H(0-9)"`, "within 1-31"},
		{"H/0 * * * *", `field 1 (minute) "H/0"`, "positive number"},
		{"H/x * * * *", `field 1 (minute) "H/x"`, "positive number"},
		{"H/61 * * * *", `field 1 (minute) "H/61"`, "at most 60"},
		{"0 H(0-5)/7 * * *", `field 2 (hour) "H(0-5)/7"`, "at most 6"},
		{"H5 * * * *", `field 1 (minute) "H5"`, "not an H form"},
		{"H-5 * * * *", `field 1 (minute) "H-5"`, "not an H form"},
		{"0 0 * * 1,H(7-8)", `field 5 (day of week) "1,H(7-8)"`, "within 0-6"},
		{"H H 0 * * * *", "", ""}, // 7 fields: left to ParseSpec, which names the count
	} {
		_, err := schedseam.ResolveSpec(tc.spec, "bad")
		if tc.field == "" {
			require.NoError(t, err, tc.spec)
			_, err = scheduler.ParseSpec(tc.spec, nil)
			assert.ErrorContains(t, err, "has 7 fields", tc.spec)
			continue
		}
		require.Error(t, err, tc.spec)
		require.Truef(t, scheduler.IsSpecError(err), "%s: %v is not a spec error", tc.spec, err)
		assert.Contains(t, err.Error(), tc.field, tc.spec)
		assert.Contains(t, err.Error(), tc.want, tc.spec)
	}
}
