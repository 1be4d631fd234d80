package middleware

// What waiting for a Stop costs a run, taken and freed as Lock does around its acquisition:
// "scheduler" waits for the scheduler's stopping context carried by the run's context (what a
// scheduler's runs do), "channel" for a channel of the caller's own; "parallel" takes them from
// every core at once, as a burst of ticks does. goroutines/wait counts the goroutines that a
// thousand waits under way at once hold, per wait.
//
//	go test -run '^$' -bench UntilStop -benchmem -count 6 ./middleware/

import (
	"context"
	"runtime"
	"testing"

	"github.com/cronlock/cronlock/internal/schedseam"
)

func BenchmarkUntilStop(b *testing.B) {
	stopping, stop := context.WithCancel(context.Background())
	defer stop()
	for name, ctx := range map[string]context.Context{
		"scheduler": schedseam.WithStopping(context.Background(), stopping),
		"channel":   context.Background(),
	} {
		b.Run(name, func(b *testing.B) {
			const held = 1000
			before := runtime.NumGoroutine()
			var frees []context.CancelFunc
			for range held {
				_, free := untilStop(ctx, stopping.Done())
				frees = append(frees, free)
			}
			goroutines := runtime.NumGoroutine() - before
			for _, free := range frees {
				free()
			}
			b.ReportAllocs()
			for b.Loop() {
				_, free := untilStop(ctx, stopping.Done())
				free()
			}
			b.ReportMetric(float64(goroutines)/held, "goroutines/wait")
		})
		b.Run(name+"-parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, free := untilStop(ctx, stopping.Done())
					free()
				}
			})
		})
	}
}
