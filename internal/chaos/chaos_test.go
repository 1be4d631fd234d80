//go:build linux

package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var (
	duration = flag.Duration("chaos.duration", 0, "length of the fault phase; 0 skips TestChaos")
	seed     = flag.Uint64("chaos.seed", 0, "seed of the fault schedule; 0 picks one")
	faults   = flag.String("chaos.faults", "all", "comma-separated fault classes, or all")
	daemons  = flag.Int("chaos.daemons", 1, "how many of the 4 workers are daemon workers (cronlock run) rather than testworkers")
	burst    = flag.Int("chaos.burst", 300, "with the burst fault class, how many jobs of the burst set each worker runs (all due at the same instants)")
	keep     = flag.Bool("chaos.keep", false, "keep the run directory (node data, worker logs) even if the run passed")
	store    = flag.String("chaos.fence", string(RedisStore), "the fenced store the runs write to: redis (a script on the ledger node) or postgres (package pgfence on a Postgres server)")
)

// TestChaos is one chaos run (make chaos). It is skipped unless -chaos.duration is set.
func TestChaos(t *testing.T) {
	if *duration == 0 {
		t.Skip("a chaos run: make chaos DURATION=2m (or go test -run TestChaos ./internal/chaos -chaos.duration=2m)")
	}
	defer goleak.VerifyNone(t)
	classes, err := ParseClasses(*faults)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStore(*store)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Seed: *seed, Duration: *duration, Faults: classes, Daemons: *daemons, Burst: *burst, Store: st, Logf: t.Logf}
	if cfg.Seed == 0 {
		cfg.Seed = uint64(time.Now().UnixNano()) % 1_000_000
	}
	if cfg.Dir, err = os.MkdirTemp("", "cronlock-chaos-*"); err != nil {
		t.Fatal(err)
	}
	cfg.Worker = filepath.Join(cfg.Dir, "testworker")
	cfg.Daemon = filepath.Join(cfg.Dir, "cronlock")
	for bin, pkg := range map[string]string{cfg.Worker: "internal/testworker", cfg.Daemon: "cmd/cronlock"} {
		if out, err := exec.Command("go", "build", "-o", bin, "github.com/cronlock/cronlock/"+pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	t.Logf("seed %d, faults %s, duration %v, %d daemon workers, fenced store %s, run directory %s", cfg.Seed, *faults, cfg.Duration, cfg.Daemons, cfg.Store, cfg.Dir)

	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatalf("chaos run: %v\nrun directory: %s\nreplay: %s", err, cfg.Dir, ReplayCommand(cfg))
	}
	t.Log("\n" + rep.Summary())
	if leftovers := processesUnder(cfg.Dir); len(leftovers) > 0 {
		rep.Problems = append(rep.Problems, "processes left running: "+strings.Join(leftovers, ", "))
	}
	if !rep.OK() {
		for _, v := range rep.Result.Violations {
			t.Error(v)
		}
		for _, p := range rep.Problems {
			t.Error(p)
		}
		t.Fatalf("chaos run failed; run directory: %s\nreplay: %s", cfg.Dir, ReplayCommand(cfg))
	}
	if !*keep {
		os.RemoveAll(cfg.Dir)
	}
}

// processesUnder lists the processes whose command line mentions dir (the workers, the
// daemon workers' supervisors) or whose working directory is in it (the nodes: redis-server
// rewrites its command line; the processes of the daemon workers' runs), which must all be
// gone once the run returned.
func processesUnder(dir string) []string {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var out []string
	for _, proc := range procs {
		cmdline, err := os.ReadFile(filepath.Join(proc, "cmdline"))
		if err != nil {
			continue
		}
		cwd, _ := os.Readlink(filepath.Join(proc, "cwd"))
		if strings.Contains(string(cmdline), dir+"/") || strings.HasPrefix(cwd+"/", dir+"/") {
			out = append(out, fmt.Sprintf("pid %s: %s", filepath.Base(proc), strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return out
}
