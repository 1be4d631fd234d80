package containertest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/redistest"
)

const (
	baseImage = "cronlock:dev"
	testImage = "cronlock:containertest"
	// every is the job's interval; the job works for a second of it.
	every = 2 * time.Second
)

// engine is the container engine: $CONTAINER, else podman, else docker when its daemon runs.
func engine(t *testing.T) string {
	if e := os.Getenv("CONTAINER"); e != "" {
		return e
	}
	if _, err := exec.LookPath("podman"); err == nil {
		return "podman"
	}
	if exec.Command("docker", "info").Run() == nil {
		return "docker"
	}
	t.Skip("no container engine: neither podman nor a running docker was found (scripts/deps.sh installs podman; CONTAINER= picks one)")
	return ""
}

// The job: under flock, it appends "TICK REPLICA start" to /shared/runs, works a second, and
// appends "TICK REPLICA end". Before that it leaves a process behind that exits at once: an
// orphan, which becomes a zombie of the container's PID 1 unless PID 1 reaps it.
const jobScript = `b=/bin/busybox
($b sleep 0.1 &)
log() { /usr/bin/flock /shared/runs.lock $b sh -c "echo $CRONLOCK_TICK_UNIX_MS $CRONLOCK_REPLICA $1 >> /shared/runs"; }
log start
$b sleep 1
log end
`

func TestImage(t *testing.T) {
	eng := engine(t)
	// Building bounds itself only by the test's -timeout: a cold build cache compiles everything.
	c := &containers{t: t, ctx: context.Background(), eng: eng, prefix: fmt.Sprintf("cronlock-test-%d", os.Getpid())}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	c.must("make", "-C", root, "--no-print-directory", "image", "CONTAINER="+eng, "IMAGE="+baseImage)
	c.buildTestImage()

	// The containers take about a minute; the bound only keeps a stuck run from hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c.ctx = ctx

	nodes := redistest.StartN(t, 3, redistest.Config{})
	dir := t.TempDir()
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o777); err != nil { // past the umask: the containers' user is 65532
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "cronlock.yaml")
	config := fmt.Sprintf(`nodes: [%q, %q, %q]
max_ttl: 10s
jobs:
  - name: ship
    schedule: "@every %s"
    lock_ttl: 3s
    overlap: allow
    command: ["/bin/busybox", "sh", "-c", %q]
`, nodes[0].Addr(), nodes[1].Addr(), nodes[2].Addr(), every, jobScript)
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	mounts := []string{"--network", "host", "-v", cfg + ":/etc/cronlock/cronlock.yaml:ro", "-v", shared + ":/shared"}

	// First deployment: the new nodes' quarantine is ended once, with the image itself.
	c.must(append(append([]string{eng, "run", "--rm"}, mounts...), testImage,
		"check", "--config", "/etc/cronlock/cronlock.yaml", "--end-quarantine")...)

	for _, r := range []string{"r1", "r2", "r3"} {
		c.must(append(append([]string{eng, "run", "-d", "--name", c.name(r)}, mounts...), testImage,
			"run", "--config", "/etc/cronlock/cronlock.yaml", "--replica", r, "--drain", "30s")...)
		t.Cleanup(func() { c.remove(r) })
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.logs()
		}
	})
	runs := &ledger{path: filepath.Join(shared, "runs")}

	// Every tick once, on some replica.
	runs.waitFor(ctx, t, func(l *ledger) bool { return l.ended() >= 3 })

	// SIGKILL to the container that is running a command: its tick is not run again, the next
	// ticks go on in the other two.
	killed := runs.waitForStart(ctx, t, "")
	c.must(eng, "kill", "--signal", "KILL", c.name(killed.replica))
	runs.waitFor(ctx, t, func(l *ledger) bool { return l.endedAfter(killed.tick) >= 3 })

	// SIGTERM to a container while it runs a command: it drains (the run ends) and exits 0.
	stopped := runs.waitForStart(ctx, t, killed.replica)
	c.must(eng, "stop", "--time", "60", c.name(stopped.replica))
	if code := strings.TrimSpace(c.must(eng, "inspect", "--format", "{{.State.ExitCode}}", c.name(stopped.replica))); code != "0" {
		t.Errorf("replica %s exited %s after SIGTERM, want 0 (drained)", stopped.replica, code)
	}
	if !runs.read(t).has(stopped.tick, "end") {
		t.Errorf("the run of tick %d on %s did not finish before its replica exited: not drained", stopped.tick, stopped.replica)
	}
	last := lastReplica(killed.replica, stopped.replica)
	runs.waitFor(ctx, t, func(l *ledger) bool { return l.endedAfter(stopped.tick) >= 2 })

	// The orphans' zombies: none left in the container still running, after a dozen runs.
	if z := c.zombies(last); len(z) > 0 {
		t.Errorf("zombies in the container of %s (PID 1 does not reap): %s", last, strings.Join(z, "; "))
	}
	c.must(eng, "stop", "--time", "60", c.name(last))

	l := runs.read(t)
	t.Logf("runs:\n%s", l.text)
	l.check(t, killed)
}

// containers runs the engine's commands for one test.
type containers struct {
	t      *testing.T
	ctx    context.Context
	eng    string
	prefix string
}

func (c *containers) name(replica string) string { return c.prefix + "-" + replica }

// must runs a command and returns its stdout; it fails the test if the command fails.
func (c *containers) must(argv ...string) string {
	c.t.Helper()
	cmd := exec.CommandContext(c.ctx, argv[0], argv[1:]...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		c.t.Fatalf("%s: %v\n%s%s", strings.Join(argv, " "), err, out, stderr.String())
	}
	return string(out)
}

// buildTestImage derives testImage from the image, adding the tools the job runs, the way
// users add theirs: a static busybox (a shell, sleep) and the host's flock with the shared
// libraries it links (Debian's busybox has no flock).
func (c *containers) buildTestImage() {
	c.t.Helper()
	if exec.Command("ldd", "/bin/busybox").Run() == nil {
		c.t.Fatal("the test image needs a static /bin/busybox (apt-get install busybox-static; scripts/deps.sh does)")
	}
	flock, err := exec.LookPath("flock")
	if err != nil {
		c.t.Fatalf("the test image needs the host's flock (util-linux): %v", err)
	}
	files := []string{"/bin/busybox", flock} // copied to the same path, but flock to /usr/bin/flock
	out, err := exec.Command("ldd", flock).Output()
	if err != nil {
		c.t.Fatalf("ldd %s: %v", flock, err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "/") {
				files = append(files, f)
			}
		}
	}
	ctxDir := c.t.TempDir()
	var df strings.Builder
	df.WriteString("FROM " + baseImage + "\n")
	for i, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			c.t.Fatal(err)
		}
		name := fmt.Sprintf("f%d", i)
		if err := os.WriteFile(filepath.Join(ctxDir, name), b, 0o755); err != nil {
			c.t.Fatal(err)
		}
		if f == flock {
			f = "/usr/bin/flock"
		}
		fmt.Fprintf(&df, "COPY %s %s\n", name, f)
	}
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(df.String()), 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.must(c.eng, "build", "-q", "-t", testImage, ctxDir)
}

func (c *containers) remove(replica string) {
	out, err := exec.Command(c.eng, "rm", "-f", c.name(replica)).CombinedOutput()
	if err != nil {
		c.t.Logf("removing %s: %v\n%s", c.name(replica), err, out)
	}
}

func (c *containers) logs() {
	for _, r := range []string{"r1", "r2", "r3"} {
		out, _ := exec.Command(c.eng, "logs", c.name(r)).CombinedOutput()
		c.t.Logf("logs of %s:\n%s", c.name(r), out)
	}
}

// zombies lists the processes of the replica's container that have exited and wait for their
// parent (state Z), from its /proc.
func (c *containers) zombies(replica string) []string {
	c.t.Helper()
	out := c.must(c.eng, "exec", c.name(replica), "/bin/busybox", "sh", "-c",
		`for f in /proc/[0-9]*/stat; do /bin/busybox cat "$f" 2>/dev/null; echo; done`)
	var z []string
	for _, line := range strings.Split(out, "\n") {
		i := strings.LastIndexByte(line, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(line[i+1:]); len(f) > 0 && f[0] == "Z" {
			z = append(z, line)
		}
	}
	return z
}

func lastReplica(gone ...string) string {
	for _, r := range []string{"r1", "r2", "r3"} {
		if !strings.Contains(strings.Join(gone, " "), r) {
			return r
		}
	}
	return ""
}

// ledger is the job's file of runs: "TICK REPLICA start|end" lines.
type ledger struct {
	path string
	text string
	runs []run
}

type run struct {
	tick    int64
	replica string
	event   string
}

func (l *ledger) read(t *testing.T) *ledger {
	t.Helper()
	b, err := os.ReadFile(l.path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	r := &ledger{path: l.path, text: string(b)}
	sc := bufio.NewScanner(strings.NewReader(r.text))
	for sc.Scan() {
		var x run
		if _, err := fmt.Sscan(sc.Text(), &x.tick, &x.replica, &x.event); err != nil {
			t.Fatalf("ledger line %q: %v", sc.Text(), err)
		}
		r.runs = append(r.runs, x)
	}
	return r
}

// waitFor polls the ledger until cond holds (the runs come from other processes: there is no
// event to wait on). ctx bounds it.
func (l *ledger) waitFor(ctx context.Context, t *testing.T, cond func(*ledger) bool) *ledger {
	t.Helper()
	for {
		if r := l.read(t); cond(r) {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for the job's runs: %v\n%s", ctx.Err(), l.read(t).text)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// waitForStart waits for a run that starts after the ledger's current end, on a replica other
// than not, and still runs.
func (l *ledger) waitForStart(ctx context.Context, t *testing.T, not string) run {
	t.Helper()
	seen := len(l.read(t).runs)
	var started run
	l.waitFor(ctx, t, func(r *ledger) bool {
		for _, x := range r.runs[seen:] {
			if x.event == "start" && x.replica != not && !r.has(x.tick, "end") {
				started = x
				return true
			}
		}
		return false
	})
	return started
}

func (l *ledger) has(tick int64, event string) bool {
	for _, x := range l.runs {
		if x.tick == tick && x.event == event {
			return true
		}
	}
	return false
}

func (l *ledger) ended() int { return l.endedAfter(0) }

func (l *ledger) endedAfter(tick int64) int {
	n := 0
	for _, x := range l.runs {
		if x.event == "end" && x.tick > tick {
			n++
		}
	}
	return n
}

// check: each tick started once; every tick from the first to the last ran (overlap: allow,
// so the tick after a kill need not wait for the killed run's lock); every start but the killed
// run's has its end, on the same replica; nothing of the killed replica after its kill.
func (l *ledger) check(t *testing.T, killed run) {
	t.Helper()
	starts := map[int64]run{}
	var first, last int64
	for _, x := range l.runs {
		switch x.event {
		case "start":
			if prev, ok := starts[x.tick]; ok {
				t.Errorf("tick %d ran twice: on %s and on %s", x.tick, prev.replica, x.replica)
			}
			starts[x.tick] = x
			if first == 0 || x.tick < first {
				first = x.tick
			}
			last = max(last, x.tick)
		case "end":
			if s, ok := starts[x.tick]; !ok || s.replica != x.replica {
				t.Errorf("tick %d ended on %s without starting there", x.tick, x.replica)
			}
		}
		if x.replica == killed.replica && x.tick > killed.tick {
			t.Errorf("replica %s ran tick %d after it was killed", x.replica, x.tick)
		}
	}
	for tick := first; tick <= last; tick += every.Milliseconds() {
		s, ok := starts[tick]
		switch {
		case !ok:
			t.Errorf("tick %d did not run", tick)
		case tick == killed.tick:
			if l.has(tick, "end") {
				t.Errorf("the killed run of tick %d ended", tick)
			}
		case !l.has(tick, "end"):
			t.Errorf("the run of tick %d on %s did not end", tick, s.replica)
		}
	}
}
