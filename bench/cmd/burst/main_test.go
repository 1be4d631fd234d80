package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain makes the test binary a replica when the parent under test starts it as one.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerFlag {
		if err := worker(os.Args[2:]); err != nil {
			fmt.Fprintln(os.Stderr, "burst replica:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// tinyConfig is a run small enough for a test: 2 replicas, 50 jobs every 2 seconds, one
// instant skipped, two measured (burst) or four (spread).
func tinyConfig(workload string) config {
	c := config{workload: workload, jobs: 50, replicas: 2, nodes: 3, period: 2, skip: 1, instants: 2, grace: 2 * time.Second}
	if workload == workloadSpread {
		c.instants = 4
	}
	return c
}

// emptyTempDir points TMPDIR at a new directory and returns a check that the directory is
// empty again: the run removed its nodes' and replicas' files.
func emptyTempDir(t *testing.T) func() {
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	return func() {
		t.Helper()
		if left, _ := os.ReadDir(dir); len(left) > 0 {
			t.Errorf("left in the temporary directory: %v", left)
		}
	}
}

// A tiny run of each workload, end to end — real redis-servers, replica processes, the
// ledgers read back — runs every measured tick once and reports every figure.
func TestRunEndToEnd(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, workload := range []string{workloadBurst, workloadSpread} {
		t.Run(workload, func(t *testing.T) {
			cleaned := emptyTempDir(t)
			cfg := tinyConfig(workload)
			cfg.logs = filepath.Join(t.TempDir(), "logs")
			r, err := measure(context.Background(), self, cfg)
			if err != nil {
				t.Fatal(err)
			}
			cleaned()
			if logs, _ := filepath.Glob(filepath.Join(cfg.logs, workload+"-50-*-replica-*.log")); len(logs) != cfg.replicas {
				t.Errorf("replica logs kept: %v, want one per replica", logs)
			}
			// burst: 50 jobs due at each of 2 instants; spread: 25 due at each of 4.
			if r.Ticks != 100 || len(r.Instants) != cfg.instants || r.Runs != r.Ticks {
				t.Errorf("%d ticks, %d runs over %d instants; want 100 ticks run once over %d", r.Ticks, r.Runs, len(r.Instants), cfg.instants)
			}
			if r.Missed != 0 || r.Duplicates != 0 || r.Unexpected != 0 {
				t.Errorf("missed %d, duplicates %d, unexpected %d; want none", r.Missed, r.Duplicates, r.Unexpected)
			}
			for _, in := range r.Instants {
				if in.Due != r.Ticks/cfg.instants || in.Runs != in.Due || in.P50 <= 0 || in.P50 > in.P99 || in.P99 > in.Max {
					t.Errorf("implausible instant: %+v", in)
				}
			}
			if r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.Max || r.ReplicaCPU <= 0 || r.NodeCPU <= 0 || r.NodeInstr != 0 {
				t.Errorf("implausible figures: %+v", r)
			}
			if r.Commands["evalsha"].Calls+r.Commands["eval"].Calls < 1 {
				t.Errorf("fewer than one script call on the nodes per run: %v", r.Commands)
			}
			if len(r.StopErrors) > 0 {
				t.Errorf("a replica's Stop failed: %v", r.StopErrors)
			}
		})
	}
}

// A replica that dies — before it is ready, or in the measured window — fails the run with
// its stderr, and the run still stops the other replica and the nodes and removes its files.
func TestReplicaThatDiesFailsTheRun(t *testing.T) {
	for name, script := range map[string]string{
		"before ready": "echo 'replica failed to start' >&2; exit 3",
		// The window's start signal kills it (the trap runs once the sleep returns).
		"in the window": "trap 'echo replica failed in the window >&2; exit 3' USR1; echo ready; while :; do sleep 0.05; done",
	} {
		t.Run(name, func(t *testing.T) {
			cleaned := emptyTempDir(t)
			self := filepath.Join(t.TempDir(), "replica.sh")
			if err := os.WriteFile(self, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := measure(context.Background(), self, tinyConfig(workloadBurst))
			if err == nil || !strings.Contains(err.Error(), "replica failed") {
				t.Errorf("err = %v; want the replica's stderr", err)
			}
			cleaned()
		})
	}
}

func TestConfigRefusesBadSettings(t *testing.T) {
	good := tinyConfig(workloadBurst)
	for flag, change := range map[string]func(*config){
		"-workload": func(c *config) { c.workload = "herd" },
		"-jobs":     func(c *config) { c.jobs = 0 },
		"-period":   func(c *config) { c.period = 7 },
		"-replicas": func(c *config) { c.replicas = 0 },
		"-nodes":    func(c *config) { c.nodes = 2 },
		"-skip":     func(c *config) { c.skip = 0 },
		"-instants": func(c *config) { c.instants = 0 },
		"-grace":    func(c *config) { c.grace = 0 },
	} {
		c := good
		change(&c)
		if err := c.validate(); err == nil || !strings.HasPrefix(err.Error(), flag+" ") {
			t.Errorf("%s: err = %v; want one naming the flag", flag, err)
		}
	}
	if err := good.validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}

// The measured instants come after the skipped ones, which come after the start; the costs'
// window is as many steps as instants, from half a step before the first.
func TestWindow(t *testing.T) {
	ready := time.Date(2026, 12, 6, 12, 0, 3, 500e6, time.UTC)
	for _, c := range []struct {
		cfg   config
		first time.Time
	}{
		{config{workload: workloadBurst, period: 10, skip: 1, instants: 3, grace: 10 * time.Second}, time.Date(2026, 12, 6, 12, 0, 20, 0, time.UTC)},
		{config{workload: workloadSpread, period: 10, skip: 10, instants: 30, grace: 10 * time.Second}, time.Date(2026, 12, 6, 12, 0, 14, 0, time.UTC)},
	} {
		w := c.cfg.window(ready)
		step := c.cfg.plan().step()
		last := c.first.Add(time.Duration(c.cfg.instants-1) * step)
		if len(w.instants) != c.cfg.instants || !w.instants[0].Equal(c.first) || !w.instants[len(w.instants)-1].Equal(last) {
			t.Errorf("%s: instants %v, want %d from %v", c.cfg.workload, w.instants, c.cfg.instants, c.first)
		}
		if !w.from.Equal(c.first.Add(-step/2)) || w.to.Sub(w.from) != time.Duration(c.cfg.instants)*step || !w.end.Equal(last.Add(c.cfg.grace)) {
			t.Errorf("%s: window %v to %v, end %v", c.cfg.workload, w.from, w.to, w.end)
		}
	}
}
