package main

import (
	"bytes"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// runChild runs one short run of lib's workload on n nodes and returns its result.
func runChild(t *testing.T, lib, workload, n string) result {
	t.Helper()
	var out bytes.Buffer
	if err := child(&out, lib, workload, n, 50*time.Millisecond, 200*time.Millisecond, "", false, ""); err != nil {
		t.Fatal(err)
	}
	var r result
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	if r.Lib != lib || r.Workload != workload || r.Allocs <= 0 || r.CmdUs <= 0 || r.CPUUs <= 0 {
		t.Errorf("implausible run: %+v", r)
	}
	return r
}

// A short run of each library on real redis-servers measures pairs and finds each library's
// commands on the nodes: cronlock's two scripts, redsync's SET and script.
func TestChildMeasuresPairsAndNodeCommands(t *testing.T) {
	for lib, want := range map[string]map[string]float64{
		"cronlock": {"evalsha": 2},
		"redsync":  {"set": 1, "evalsha": 1},
	} {
		t.Run(lib, func(t *testing.T) {
			r := runChild(t, lib, workloadPair, "1")
			if r.Pairs == 0 || r.P50 <= 0 || r.P50 > r.P99 {
				t.Errorf("implausible run: %+v", r)
			}
			for cmd, calls := range want {
				if got := r.Commands[cmd].Calls; math.Abs(got-calls) > calls/100 {
					t.Errorf("%s: %v calls per pair, want %v (all: %v)", cmd, got, calls, r.Commands)
				}
			}
		})
	}
}

// A short run of each library's racers on 3 real redis-servers wins the lock again and again,
// with more attempts than acquisitions (the racers lose to each other), each attempt a script
// call per node for cronlock (a racer that loses on the primary node asks no other) and at
// least a SET per node for redsync. Two holders at once would fail the run.
func TestChildRacesForOneKey(t *testing.T) {
	for _, lib := range []string{"cronlock", "redsync"} {
		t.Run(lib, func(t *testing.T) {
			r := runChild(t, lib, workloadRacers, "3")
			if r.Pairs == 0 || r.PerSec <= 0 || r.Attempts <= 1 {
				t.Errorf("implausible racers: %+v", r)
			}
			if r.Errors > 0 { // a node timeout on a loaded machine: counted, not fatal
				t.Logf("%d attempts failed; last: %s", r.Errors, r.LastErr)
			}
			cmd := "evalsha"
			if lib == "redsync" {
				cmd = "set"
			}
			if got := r.Commands[cmd].Calls; got < r.Attempts {
				t.Errorf("%s: %.2f calls per acquisition, fewer than its %.2f attempts (all: %v)", cmd, got, r.Attempts, r.Commands)
			}
		})
	}
}

func TestChildRefusesBadFlags(t *testing.T) {
	for _, c := range []struct{ lib, workload, nodes string }{
		{"cronlock", workloadPair, "0"}, {"cronlock", workloadPair, "1,3"}, {"mutex", workloadPair, "1"},
		{"cronlock", "herd", "1"}, {"redsync", workloadRacers, "x"},
	} {
		if err := child(&bytes.Buffer{}, c.lib, c.workload, c.nodes, 0, 0, "", false, ""); err == nil {
			t.Errorf("-lib %s -workload %s -nodes %s: no error", c.lib, c.workload, c.nodes)
		}
	}
}

// With -callgrind the nodes run under callgrind, and a run reports the instructions they
// executed per pair: a plausible count for each library (thousands to millions per pair).
func TestChildCountsNodeInstructions(t *testing.T) {
	if _, err := exec.LookPath("callgrind_control"); err != nil {
		t.Skip("valgrind is not installed")
	}
	for _, lib := range []string{"cronlock", "redsync"} {
		t.Run(lib, func(t *testing.T) {
			var out bytes.Buffer
			dir := t.TempDir()
			if err := child(&out, lib, workloadPair, "1", 200*time.Millisecond, time.Second, "", true, dir); err != nil {
				t.Fatal(err)
			}
			var r result
			if err := json.Unmarshal(out.Bytes(), &r); err != nil {
				t.Fatalf("%v: %s", err, out.String())
			}
			if r.Pairs == 0 || r.Instr < 1e3 || r.Instr > 1e7 {
				t.Errorf("implausible instructions per pair: %+v", r)
			}
			if dumps, _ := filepath.Glob(filepath.Join(dir, "node.*.1")); len(dumps) != 1 {
				t.Errorf("kept callgrind dumps in -callgrind-dir: %v, want one", dumps)
			}
		})
	}
}
