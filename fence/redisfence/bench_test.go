package redisfence_test

import (
	"context"
	"testing"

	"github.com/cronlock/cronlock/fence/redisfence"
	"github.com/cronlock/cronlock/internal/redistest"
)

// BenchmarkSet compares SET with the guarded Set (one client, loopback): the check's cost per
// write is the difference.
func BenchmarkSet(b *testing.B) {
	rdb := redistest.Start(b, redistest.Config{}).Client()
	ctx := context.Background()
	b.Run("unguarded", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Set(ctx, "{r}:v", "value", 0).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	var token uint64 // across the runs of b.Loop
	b.Run("guarded", func(b *testing.B) {
		for b.Loop() {
			token++
			if err := redisfence.Set(ctx, rdb, "r", token, "{r}:v", "value", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
