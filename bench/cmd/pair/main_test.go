package main

import (
	"bytes"
	"encoding/json"
	"math"
	"testing"
	"time"
)

// A short run of each library on real redis-servers measures pairs and finds each library's
// commands on the nodes: cronlock's two scripts, redsync's SET and script.
func TestChildMeasuresPairsAndNodeCommands(t *testing.T) {
	for lib, want := range map[string]map[string]float64{
		"cronlock": {"evalsha": 2},
		"redsync":  {"set": 1, "evalsha": 1},
	} {
		t.Run(lib, func(t *testing.T) {
			var out bytes.Buffer
			if err := child(&out, lib, "1", 50*time.Millisecond, 200*time.Millisecond, ""); err != nil {
				t.Fatal(err)
			}
			var r result
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if r.Pairs == 0 || r.P50 <= 0 || r.P50 > r.P99 || r.Allocs <= 0 {
				t.Errorf("implausible run: %+v", r)
			}
			for cmd, calls := range want {
				if got := r.Commands[cmd].Calls; math.Abs(got-calls) > calls/100 {
					t.Errorf("%s: %v calls per pair, want %v (all: %v)", cmd, got, calls, r.Commands)
				}
			}
			if r.CmdUs <= 0 || r.CPUUs <= 0 {
				t.Errorf("no cost on the nodes: %+v", r)
			}
		})
	}
}

func TestChildRefusesBadFlags(t *testing.T) {
	for _, c := range []struct{ lib, nodes string }{{"cronlock", "0"}, {"cronlock", "1,3"}, {"mutex", "1"}} {
		if err := child(&bytes.Buffer{}, c.lib, c.nodes, 0, 0, ""); err == nil {
			t.Errorf("-lib %s -nodes %s: no error", c.lib, c.nodes)
		}
	}
}
