package scheduler_test

// Pure logic: ParseSpec must never panic (robfig/cron's parser does on "CRON_TZ=X" without a
// schedule), and every schedule it returns must move forward; ResolveSpec must never panic,
// and what it returns for a spec with H must parse or be refused with an error.

import (
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/scheduler"
)

func FuzzParseSpec(f *testing.F) {
	for _, seed := range []string{
		"*/5 * * * *", "0 30 9 * * 1-5", "@hourly", "@every 10s", "@every 1ms", "CRON_TZ=Europe/Paris 0 9 * * *",
		"TZ=America/New_York 30 2 * * *", "CRON_TZ=UTC", "CRON_TZ= ", "0 0 30 2 *", "60 * * * *", "* * * * * * *",
		"@every -1s", "@every 1h1ns", "1-5/2 */3 1,15 jan-mar mon", "", "@", "*/0 * * * *",
	} {
		f.Add(seed)
	}
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		f.Fatal(err)
	}
	from := time.Date(2024, 11, 3, 0, 30, 0, 0, ny)
	f.Fuzz(func(t *testing.T, spec string) {
		s, err := scheduler.ParseSpec(spec, ny)
		if err != nil {
			return
		}
		prev := from
		for range 5 {
			next := s.Next(prev)
			if next.IsZero() {
				return
			}
			if !next.After(prev) {
				t.Fatalf("%q: Next(%v) = %v, not after it", spec, prev, next)
			}
			prev = next
		}
	})
}

func FuzzResolveSpec(f *testing.F) {
	for _, seed := range []string{
		"H H * * *", "H/15 * * * *", "H(0-7) H(9-17)/2 * * *", "0,H(30-40) * * * *", "H( * * * *", "H(5-) * * * *",
		"H(-) * * * *", "H/ * * * *", "H(9-1)/0 * * * *", "CRON_TZ=UTC H * * * *", "CRON_TZ=", "H", "@every 1H",
	} {
		f.Add(seed, "job")
	}
	f.Fuzz(func(t *testing.T, spec, name string) {
		got, err := schedseam.ResolveSpec(spec, name)
		if err != nil {
			return
		}
		again, _ := schedseam.ResolveSpec(spec, name)
		if again != got {
			t.Fatalf("%q for %q: %q, then %q", spec, name, got, again)
		}
		_, _ = scheduler.ParseSpec(got, nil) // must not panic
	})
}
