package scheduler_test

// These tests are pure logic (the spec parser and the DST rules): no Redis, no clock.

import (
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/scheduler"
)

func mustLoad(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// ticks returns the first n ticks of spec after from.
func ticks(t *testing.T, spec string, loc *time.Location, from time.Time, n int) []string {
	t.Helper()
	s, err := scheduler.ParseSpec(spec, loc)
	require.NoError(t, err)
	var out []string
	prev := from
	for range n {
		next := s.Next(prev)
		require.True(t, next.After(prev), "Next(%v) = %v is not after it", prev, next)
		out = append(out, next.In(from.Location()).Format("Jan 2 15:04:05 MST"))
		prev = next
	}
	return out
}

func TestParseSpecErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", "is empty"},
		{"* * *", "has 3 fields: give 5"},
		{"* * * * * * *", "has 7 fields"},
		{"60 * * * *", `field 1 (minute) "60": end of range (60) above maximum (59)`},
		{"0 61 * * * *", `field 2 (minute) "61"`},
		{"* 24 * * *", `field 2 (hour) "24"`},
		{"* * 0 * *", `field 3 (day of month) "0"`},
		{"* * * foo *", `field 4 (month) "foo"`},
		{"* * * * 8", `field 5 (day of week) "8"`},
		{"*/0 * * * *", "step of range should be a positive number"},
		{"@fortnightly", `unknown descriptor "@fortnightly"`},
		{"@every", "@every takes one duration"},
		{"@every ten", `"ten" is not a duration`},
		{"@every 0s", "at least 1ms"},
		{"@every 1500us", "whole milliseconds"},
		{"CRON_TZ=Mars/Olympus 0 9 * * *", `time zone "Mars/Olympus" is unknown`},
		{"CRON_TZ=UTC", "no schedule after it"},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := scheduler.ParseSpec(tc.spec, nil)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), `e.g. "*/5 * * * *"`, "the message shows examples")
			assert.True(t, scheduler.IsSpecError(err), "a spec error")
		})
	}
}

func TestParseSpecForms(t *testing.T) {
	from := time.Date(2025, 1, 6, 8, 59, 59, 0, time.UTC) // a Monday
	for _, tc := range []struct {
		spec string
		want []string
	}{
		{"*/20 * * * *", []string{"Jan 6 09:00:00 UTC", "Jan 6 09:20:00 UTC"}},
		{"30 0 9 * * mon-fri", []string{"Jan 6 09:00:30 UTC", "Jan 7 09:00:30 UTC"}},
		{"@hourly", []string{"Jan 6 09:00:00 UTC", "Jan 6 10:00:00 UTC"}},
		{"@daily", []string{"Jan 7 00:00:00 UTC", "Jan 8 00:00:00 UTC"}},
		{"@every 90s", []string{"Jan 6 09:00:00 UTC", "Jan 6 09:01:30 UTC"}},
		{"CRON_TZ=Europe/Paris 0 10 * * *", []string{"Jan 6 09:00:00 UTC", "Jan 7 09:00:00 UTC"}},
		{"TZ=Asia/Tokyo 0 18 * * *", []string{"Jan 6 09:00:00 UTC", "Jan 7 09:00:00 UTC"}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			assert.Equal(t, tc.want, ticks(t, tc.spec, time.UTC, from, len(tc.want)))
		})
	}
}

// @every is aligned to the Unix epoch, not to the time it is asked from: two replicas that
// started at different times compute the same ticks.
func TestEveryIsAlignedToTheEpoch(t *testing.T) {
	s, err := scheduler.ParseSpec("@every 200ms", nil)
	require.NoError(t, err)
	a := s.Next(time.UnixMilli(1_700_000_000_123))
	b := s.Next(time.UnixMilli(1_700_000_000_050))
	assert.Equal(t, time.UnixMilli(1_700_000_000_200), a)
	assert.Equal(t, a, b)
	assert.Equal(t, time.UnixMilli(1_700_000_000_400), s.Next(a), "a tick is not its own next")

	s, err = scheduler.ParseSpec("@every 7s", nil)
	require.NoError(t, err)
	n := s.Next(time.Unix(1_700_000_000, 0))
	assert.Zero(t, n.Unix()%7)
}

// robfig/cron's own DST behaviour, which ParseSpec does not keep for fixed-hour specs: it
// drops a time in a skipped hour (no run that day) and runs a time in a repeated hour twice.
func TestRobfigDSTBehaviourIsWrapped(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	p := cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)
	s, err := p.Parse("CRON_TZ=America/New_York 30 2 * * *")
	require.NoError(t, err)
	assert.Equal(t, time.Date(2024, 3, 11, 2, 30, 0, 0, ny), s.Next(time.Date(2024, 3, 9, 23, 0, 0, 0, ny)),
		"robfig skips March 10")
	s, err = p.Parse("CRON_TZ=America/New_York 30 1 * * *")
	require.NoError(t, err)
	first := s.Next(time.Date(2024, 11, 2, 23, 0, 0, 0, ny))
	second := s.Next(first)
	assert.Equal(t, time.Hour, second.Sub(first), "robfig runs 01:30 twice on November 3")
}

// Clocks go from 02:00 EST to 03:00 EDT on 2024-03-10 in New York.
func TestDSTSkippedHour(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	from := time.Date(2024, 3, 9, 23, 0, 0, 0, ny)
	for _, tc := range []struct {
		spec string
		want []string
	}{
		// A fixed time in the skipped hour runs once, at the transition.
		{"30 2 * * *", []string{"Mar 10 03:00:00 EDT", "Mar 11 02:30:00 EDT", "Mar 12 02:30:00 EDT"}},
		{"0 2 * * *", []string{"Mar 10 03:00:00 EDT", "Mar 11 02:00:00 EDT"}},
		// Several times in the skipped hour still run once.
		{"0,15,30,45 2 * * *", []string{"Mar 10 03:00:00 EDT", "Mar 11 02:00:00 EDT"}},
		// A time in the skipped hour and the transition itself: one run at 03:00.
		{"0 30 2,3 * * *", []string{"Mar 10 03:00:00 EDT", "Mar 10 03:30:00 EDT", "Mar 11 02:30:00 EDT"}},
		// Untouched times keep their wall-clock time.
		{"30 1 * * *", []string{"Mar 10 01:30:00 EST", "Mar 11 01:30:00 EDT"}},
		{"30 3 * * *", []string{"Mar 10 03:30:00 EDT", "Mar 11 03:30:00 EDT"}},
		// Hourly specs follow real time: nothing to skip, spacing unchanged.
		{"*/30 * * * *", []string{"Mar 9 23:30:00 EST", "Mar 10 00:00:00 EST", "Mar 10 00:30:00 EST", "Mar 10 01:00:00 EST", "Mar 10 01:30:00 EST", "Mar 10 03:00:00 EDT", "Mar 10 03:30:00 EDT"}},
		{"7 * * * *", []string{"Mar 9 23:07:00 EST", "Mar 10 00:07:00 EST", "Mar 10 01:07:00 EST", "Mar 10 03:07:00 EDT"}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			assert.Equal(t, tc.want, ticks(t, tc.spec, ny, from, len(tc.want)))
			assert.Equal(t, tc.want, ticks(t, "CRON_TZ=America/New_York "+tc.spec, time.UTC, from, len(tc.want)))
		})
	}
}

// Clocks go from 02:00 EDT back to 01:00 EST on 2024-11-03 in New York: 01:00–02:00 happens
// twice.
func TestDSTRepeatedHour(t *testing.T) {
	ny := mustLoad(t, "America/New_York")
	from := time.Date(2024, 11, 2, 23, 0, 0, 0, ny)
	for _, tc := range []struct {
		spec string
		want []string
	}{
		// A fixed time in the repeated hour runs once, at its first occurrence.
		{"30 1 * * *", []string{"Nov 3 01:30:00 EDT", "Nov 4 01:30:00 EST"}},
		{"*/20 1 * * *", []string{"Nov 3 01:00:00 EDT", "Nov 3 01:20:00 EDT", "Nov 3 01:40:00 EDT", "Nov 4 01:00:00 EST"}},
		{"0 1,2 * * *", []string{"Nov 3 01:00:00 EDT", "Nov 3 02:00:00 EST", "Nov 4 01:00:00 EST"}},
		{"0 0 * * *", []string{"Nov 3 00:00:00 EDT", "Nov 4 00:00:00 EST"}},
		// Hourly specs follow real time: both passes, each instant once.
		{"0 * * * *", []string{"Nov 3 00:00:00 EDT", "Nov 3 01:00:00 EDT", "Nov 3 01:00:00 EST", "Nov 3 02:00:00 EST"}},
		{"30 * * * *", []string{"Nov 2 23:30:00 EDT", "Nov 3 00:30:00 EDT", "Nov 3 01:30:00 EDT", "Nov 3 01:30:00 EST", "Nov 3 02:30:00 EST"}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			assert.Equal(t, tc.want, ticks(t, tc.spec, ny, from, len(tc.want)))
		})
	}
	// Asked from inside the second pass, a fixed-hour spec does not fire again that night.
	inSecondPass := time.Date(2024, 11, 3, 6, 10, 0, 0, time.UTC) // 01:10 EST
	require.Equal(t, "EST", inSecondPass.In(ny).Format("MST"))
	assert.Equal(t, []string{"Nov 4 01:00:00 EST"}, ticks(t, "*/20 1 * * *", ny, inSecondPass.In(ny), 1))
	assert.Equal(t, []string{"Nov 3 01:20:00 EST"}, ticks(t, "*/20 * * * *", ny, inSecondPass.In(ny), 1))
}

// Over two years in zones with DST (including a 30-minute shift), every wall-clock time of a
// fixed-hour spec fires exactly once a day, and ticks strictly increase.
func TestDSTEveryDayOnce(t *testing.T) {
	for zone, year := range map[string]int{
		"America/New_York": 2023, "Europe/Paris": 2023, "Australia/Lord_Howe": 2023,
		"America/Sao_Paulo": 2017, // DST at midnight until 2019
	} {
		t.Run(zone, func(t *testing.T) {
			loc := mustLoad(t, zone)
			for _, spec := range []string{"30 2 * * *", "0 1 * * *", "0 0 * * *", "15 3 * * *"} {
				s, err := scheduler.ParseSpec(spec, loc)
				require.NoError(t, err)
				days := map[string]int{}
				prev := time.Date(year, 1, 1, 0, 0, 0, 0, loc)
				for range 730 {
					next := s.Next(prev)
					require.True(t, next.After(prev), "%s: Next(%v) = %v", spec, prev, next)
					days[next.Format("2006-01-02")]++
					prev = next
				}
				for d, n := range days {
					require.Equal(t, 1, n, "%s fired %d times on %s", spec, n, d)
				}
				require.Len(t, days, 730, "%s missed a day", spec)
			}
		})
	}
}

func TestParseSpecTrimsAndKeepsUTCDefault(t *testing.T) {
	s, err := scheduler.ParseSpec("  0 9 * * *  ", nil)
	require.NoError(t, err)
	next := s.Next(time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC))
	assert.Equal(t, time.Date(2025, 6, 1, 9, 0, 0, 0, time.UTC), next.UTC())
	assert.True(t, strings.HasSuffix(next.Location().String(), "UTC"))
}
