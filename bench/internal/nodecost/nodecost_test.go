package nodecost

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/internal/redistest"
)

func TestSummary(t *testing.T) {
	n, err := summary([]byte("version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 6380533\n\nfn=main\n1 2\ntotals: 6407607\n"))
	if err != nil || n != 6380533 {
		t.Errorf("summary = %d, %v; want 6380533", n, err)
	}
	if _, err := summary([]byte("events: Ir\n")); err == nil {
		t.Error("a file without a summary line: no error")
	}
}

// The counters of two real servers grow by the commands sent between two readings, summed
// over the servers; commands not sent in between are left out of Since; the CPU is read.
func TestReadCountsCommandsOnEveryNode(t *testing.T) {
	ctx := context.Background()
	var rcs []*redis.Client
	for _, s := range redistest.StartN(t, 2, redistest.Config{}) {
		rc := redis.NewClient(&redis.Options{Addr: s.Addr()})
		t.Cleanup(func() { _ = rc.Close() })
		rcs = append(rcs, rc)
		if err := rc.Set(ctx, "before", "1", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	before, err := Read(ctx, rcs)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range rcs {
		for range 3 {
			if err := rc.Incr(ctx, "n").Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	after, err := Read(ctx, rcs)
	if err != nil {
		t.Fatal(err)
	}
	d := after.Since(before)
	if got := d.Commands["incr"].Calls; got != 6 {
		t.Errorf("incr calls = %d, want 6 (3 on each of 2 nodes); all: %v", got, d.Commands)
	}
	if _, ok := d.Commands["set"]; ok {
		t.Errorf("set, sent before the first reading, is in the difference: %v", d.Commands)
	}
	if after.CPUus <= 0 {
		t.Errorf("the servers' CPU reads %v µs", after.CPUus)
	}
}
