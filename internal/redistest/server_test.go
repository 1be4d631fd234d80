package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

const helperEnv = "REDISTEST_PDEATHSIG_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		pdeathsigHelper()
		return
	}
	goleak.VerifyTestMain(m)
}

// pdeathsigHelper runs in a child test binary: it starts a server, reports
// its pid and blocks until it is killed.
func pdeathsigHelper() {
	s, err := New(Config{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.proc.pid)
	select {}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, s *Server, key string) string {
	t.Helper()
	v, err := s.Client().Get(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

func set(t *testing.T, s *Server, key, value string) {
	t.Helper()
	if err := s.Client().Set(context.Background(), key, value, 0).Err(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
}

func configGet(t *testing.T, s *Server) map[string]string {
	t.Helper()
	cfg, err := s.Client().ConfigGet(context.Background(), "*").Result()
	if err != nil {
		t.Fatalf("CONFIG GET: %v", err)
	}
	return cfg
}

func TestStartPing(t *testing.T) {
	s := Start(t, Config{})
	if !s.Running() {
		t.Fatal("Running() = false after Start")
	}
	host, port, err := net.SplitHostPort(s.Addr())
	must(t, err)
	if host != "127.0.0.1" || port == "0" {
		t.Errorf("Addr() = %q, want 127.0.0.1:<port>", s.Addr())
	}
	must(t, s.Client().Ping(context.Background()).Err())

	cfg := configGet(t, s)
	for k, want := range map[string]string{"save": "", "appendonly": "no", "dir": s.Dir(), "bind": "127.0.0.1"} {
		if cfg[k] != want {
			t.Errorf("config %s = %q, want %q", k, cfg[k], want)
		}
	}
}

func TestArgsAreApplied(t *testing.T) {
	s := Start(t, Config{Args: []string{"--maxmemory-policy", "noeviction", "--hz", "50"}})
	cfg := configGet(t, s)
	if cfg["maxmemory-policy"] != "noeviction" || cfg["hz"] != "50" {
		t.Errorf("maxmemory-policy=%q hz=%q, want noeviction 50", cfg["maxmemory-policy"], cfg["hz"])
	}
}

// A server started through Wrap runs as the wrapper's process (here a shell that leaves a
// mark and execs redis-server), and PID names it.
func TestWrap(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "wrapped")
	s := Start(t, Config{Wrap: []string{"sh", "-c", `echo "$$" > "$0"; exec "$@"`, mark}})
	must(t, s.Client().Ping(context.Background()).Err())
	data, err := os.ReadFile(mark)
	must(t, err)
	if strings.TrimSpace(string(data)) != strconv.Itoa(s.PID()) {
		t.Errorf("the wrapper ran as PID %s, the server's PID is %d", strings.TrimSpace(string(data)), s.PID())
	}
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", s.PID()))
	must(t, err)
	if b := filepath.Base(exe); b != "redis-server" && b != "redis-check-rdb" { // Debian links the two
		t.Errorf("PID %d runs %s, not redis-server", s.PID(), exe)
	}
}

func TestBadArgsReportLog(t *testing.T) {
	s, err := New(Config{Args: []string{"--no-such-directive", "1"}})
	if err == nil {
		s.Close()
		t.Fatal("New with a bad argument succeeded")
	}
	for _, want := range []string{"exited during startup", "no-such-directive"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q:\n%v", want, err)
		}
	}
}

func TestKillLosesMemoryWithoutAOF(t *testing.T) {
	s := Start(t, Config{})
	key := Key(t)
	set(t, s, key, "v")

	must(t, s.Kill())
	if s.Running() {
		t.Error("Running() = true after Kill")
	}
	must(t, s.Kill()) // no-op on a dead server
	addr := s.Addr()
	must(t, s.Restart())
	if s.Addr() != addr || !s.Running() {
		t.Errorf("after Restart: Addr() = %s (was %s), Running() = %v", s.Addr(), addr, s.Running())
	}
	if err := s.Client().Get(context.Background(), key).Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after Kill+Restart without AOF: err = %v, want redis.Nil", err)
	}
}

func TestRestartWithAOFKeepsKey(t *testing.T) {
	s := Start(t, Config{AOF: true})
	key := Key(t)
	set(t, s, key, "v1")
	must(t, s.Kill())
	must(t, s.Restart())
	if v := get(t, s, key); v != "v1" {
		t.Errorf("after Kill+Restart GET = %q, want v1", v)
	}

	set(t, s, key, "v2")
	must(t, s.Stop())
	if s.Running() {
		t.Error("Running() = true after Stop")
	}
	must(t, s.Restart())
	if v := get(t, s, key); v != "v2" {
		t.Errorf("after Stop+Restart GET = %q, want v2", v)
	}
}

func TestRestartWhileRunning(t *testing.T) {
	s := Start(t, Config{})
	old := s.proc.pid
	must(t, s.Restart())
	if s.proc.pid == old {
		t.Error("Restart kept the same process")
	}
	must(t, s.Client().Ping(context.Background()).Err())
	assertProcessGone(t, old)
}

func TestPauseResume(t *testing.T) {
	s := Start(t, Config{})
	key := Key(t)
	set(t, s, key, "v")

	must(t, s.Pause())
	if !s.Running() {
		t.Error("Running() = false while paused")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	err := s.Client().Get(ctx, key).Err()
	cancel()
	if !isTimeout(err) {
		t.Fatalf("GET on a paused server: err = %v, want a timeout", err)
	}

	must(t, s.Resume())
	if v := get(t, s, key); v != "v" {
		t.Errorf("GET after Resume = %q, want v", v)
	}
}

func TestKillAndStopWhilePaused(t *testing.T) {
	s := Start(t, Config{})
	must(t, s.Pause())
	must(t, s.Stop())
	if s.Running() {
		t.Error("Running() = true after Stop of a paused server")
	}
	must(t, s.Restart())
	must(t, s.Pause())
	must(t, s.Kill())
	if s.Running() {
		t.Error("Running() = true after Kill of a paused server")
	}
	for name, f := range map[string]func() error{"Pause": s.Pause, "Resume": s.Resume} {
		if err := f(); err == nil || !strings.Contains(err.Error(), "not running") {
			t.Errorf("%s on a dead server: err = %v, want 'not running'", name, err)
		}
	}
}

// serverClockOffset returns the server's TIME minus the host clock.
func serverClockOffset(t *testing.T, s *Server) time.Duration {
	t.Helper()
	before := time.Now()
	serverNow, err := s.Client().Time(context.Background()).Result()
	must(t, err)
	after := time.Now()
	return serverNow.Sub(before.Add(after.Sub(before) / 2))
}

func checkOffset(t *testing.T, s *Server, want time.Duration) {
	t.Helper()
	// A clock offset check, not a timing bound: the tolerance only has to
	// tell +1h from 0 from -2h.
	if got := serverClockOffset(t, s); got < want-time.Minute || got > want+time.Minute {
		t.Errorf("server clock offset = %v, want about %v", got, want)
	}
}

func TestFaketime(t *testing.T) {
	s := Start(t, Config{Faketime: "+1h"})
	checkOffset(t, s, time.Hour)

	s.SetFaketime("-2h")
	checkOffset(t, s, time.Hour) // applies at the next Restart only
	must(t, s.Restart())
	checkOffset(t, s, -2*time.Hour)

	// The pid is redis-server itself, not a wrapper: Pause must stop it.
	must(t, s.Pause())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	err := s.Client().Ping(ctx).Err()
	cancel()
	if !isTimeout(err) {
		t.Errorf("PING on a paused faketime server: err = %v, want a timeout", err)
	}
	must(t, s.Resume())

	s.SetFaketime("")
	must(t, s.Restart())
	checkOffset(t, s, 0)
}

func TestCloseLeavesNoProcess(t *testing.T) {
	s, err := New(Config{})
	must(t, err)
	pid, dir := s.proc.pid, s.Dir()
	must(t, s.Client().Ping(context.Background()).Err())

	must(t, s.Close())
	assertProcessGone(t, pid)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("temp dir %s not removed by Close (stat: %v)", dir, err)
	}
	if s.Running() {
		t.Error("Running() = true after Close")
	}
	must(t, s.Close()) // idempotent
	if err := s.Restart(); err == nil {
		t.Error("Restart after Close succeeded")
	}
}

func TestGivenDirIsKept(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "node")
	s, err := New(Config{Dir: dir, AOF: true})
	must(t, err)
	must(t, s.Close())
	if _, err := os.Stat(filepath.Join(dir, logName)); err != nil {
		t.Errorf("log in a caller-owned Dir should survive Close: %v", err)
	}
}

// assertProcessGone checks that pid no longer exists: it was reaped, not
// left as a zombie.
func assertProcessGone(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("pid %d should be gone, kill(pid, 0) = %v", pid, err)
	}
}

func TestStartN(t *testing.T) {
	dir := t.TempDir()
	servers := StartN(t, 3, Config{Dir: dir})
	if len(servers) != 3 {
		t.Fatalf("StartN returned %d servers, want 3", len(servers))
	}
	seen := map[string]bool{}
	for i, s := range servers {
		must(t, s.Client().Ping(context.Background()).Err())
		if seen[s.Addr()] {
			t.Errorf("duplicate address %s", s.Addr())
		}
		seen[s.Addr()] = true
		if want := filepath.Join(dir, "node"+strconv.Itoa(i)); s.Dir() != want {
			t.Errorf("server %d Dir() = %s, want %s", i, s.Dir(), want)
		}
	}
}

func TestKey(t *testing.T) {
	a, b := Key(t), Key(t)
	if a == b {
		t.Errorf("two keys are equal: %s", a)
	}
	if !strings.HasPrefix(a, "TestKey:") {
		t.Errorf("Key = %q, want prefix TestKey:", a)
	}
	t.Run("odd name/with {tags} & spaces", func(t *testing.T) {
		name, suffix, _ := strings.Cut(Key(t), ":")
		if want := "TestKey_odd_name_with__tags____spaces"; name != want {
			t.Errorf("sanitised name = %q, want %q", name, want)
		}
		if len(suffix) != 16 {
			t.Errorf("suffix %q, want 16 hex digits", suffix)
		}
	})
}

func TestRestartOnTakenPort(t *testing.T) {
	s := Start(t, Config{})
	must(t, s.Kill())
	ln, err := net.Listen("tcp", s.Addr())
	must(t, err)
	err = s.Restart()
	ln.Close()
	if !errors.Is(err, errPortInUse) || !strings.Contains(err.Error(), "Address already in use") {
		t.Fatalf("Restart on a taken port: err = %v, want port in use with the server log", err)
	}
	if s.Running() {
		t.Error("Running() = true after a failed Restart")
	}
	must(t, s.Restart())
	must(t, s.Client().Ping(context.Background()).Err())
}

func TestLiveClockJumpsWhileRunning(t *testing.T) {
	s := Start(t, Config{LiveClock: true})
	checkOffset(t, s, 0)
	ctx := context.Background()
	must(t, s.Client().Set(ctx, "k", "v", time.Hour).Err())

	// A forward step past the key's TTL expires it without a restart.
	must(t, s.SetClockOffset(2*time.Hour))
	checkOffset(t, s, 2*time.Hour)
	if n, err := s.Client().Exists(ctx, "k").Result(); err != nil || n != 0 {
		t.Errorf("EXISTS k after a 2h forward step = %d, %v; want 0 (expired)", n, err)
	}

	must(t, s.SetClockOffset(-time.Hour))
	checkOffset(t, s, -time.Hour)
	must(t, s.Restart())
	checkOffset(t, s, -time.Hour) // the offset holds across Restart

	if err := Start(t, Config{}).SetClockOffset(time.Second); err == nil || !strings.Contains(err.Error(), "LiveClock") {
		t.Errorf("SetClockOffset without LiveClock: err = %v, want one naming Config.LiveClock", err)
	}
}
