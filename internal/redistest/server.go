package redistest

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

const (
	// startTimeout bounds how long New and Restart wait for PING to succeed.
	startTimeout = 5 * time.Second
	// exitTimeout bounds how long Kill and Stop wait for the process to exit.
	exitTimeout = 10 * time.Second
	// bindAttempts is how many free ports New tries before giving up.
	bindAttempts = 5
	// logTailBytes is how much of the server's logs is quoted in errors.
	logTailBytes = 2048

	logName    = "redis.log"
	stdoutName = "redis.stdout.log"
	// clockName is the file a LiveClock server reads its clock offset from.
	clockName = "faketime.spec"
	// clockSettle bounds how long SetClockOffset waits for the server to see a new offset.
	clockSettle = 3 * time.Second
)

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// Config configures one redis-server. The zero value is an in-memory server
// without persistence.
type Config struct {
	// AOF enables the append-only file (appendonly yes, appendfsync
	// always) in the server's directory, so data survives Kill and Restart.
	AOF bool
	// Faketime, if set, runs redis-server under libfaketime with this
	// FAKETIME spec, e.g. "+10s", "-2s" or "+1h". It shifts the server's
	// wall clock only. Change it for the next Restart with
	// [Server.SetFaketime].
	Faketime string
	// LiveClock runs redis-server under libfaketime with its clock offset read from a file
	// in Dir (re-read at most once a second), so that SetClockOffset steps the running
	// server's wall clock — a clock jump without a restart. The first offset is Faketime's,
	// if set, else zero.
	LiveClock bool
	// Args are extra redis-server arguments appended after the defaults,
	// so they can override them, e.g. "--maxmemory-policy", "noeviction".
	// Do not override --port, --bind or --dir, which Server relies on.
	Args []string
	// Wrap, if set, is a command and its arguments that run redis-server: the server starts
	// as Wrap[0] Wrap[1:]... /path/to/redis-server ARGS, e.g. valgrind --tool=callgrind. The
	// command must become the server (exec it, as valgrind does): Stop, Kill and PID act on
	// its process.
	Wrap []string
	// Dir is the working directory (AOF files, logs). If empty a fresh
	// temporary directory is created and removed by Close; a given Dir is
	// created if needed and never removed.
	Dir string
}

// Server is one redis-server process. Its address, directory and port stay
// the same across Kill and Restart. All methods are safe for concurrent use.
type Server struct {
	bin    string
	cfg    Config
	dir    string
	ownDir bool
	port   int
	addr   string

	mu       sync.Mutex
	faketime string
	proc     *process // nil until started; the last started process
	paused   bool     // Pause was called on proc and Resume was not
	client   *redis.Client
	closed   bool
}

// process is one run of redis-server, reaped by the goroutine that started it.
type process struct {
	os   *os.Process
	pid  int
	done chan struct{} // closed once the process has been reaped
	err  error         // cmd.Wait result, valid after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// New starts a redis-server on a free 127.0.0.1 port and returns once it
// answers PING (at most 5s). The caller must Close it.
func New(cfg Config) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redistest: redis-server not found in PATH: apt-get install redis-server")
	}
	s := &Server{bin: bin, cfg: cfg, faketime: cfg.Faketime}
	s.cfg.Args, s.cfg.Wrap = slices.Clone(cfg.Args), slices.Clone(cfg.Wrap)
	if cfg.Dir == "" {
		if s.dir, err = os.MkdirTemp("", "redistest-*"); err != nil {
			return nil, fmt.Errorf("redistest: creating server directory: %w", err)
		}
		s.ownDir = true
	} else {
		if s.dir, err = filepath.Abs(cfg.Dir); err != nil {
			return nil, fmt.Errorf("redistest: server directory %q: %w", cfg.Dir, err)
		}
		if err := os.MkdirAll(s.dir, 0o755); err != nil {
			return nil, fmt.Errorf("redistest: creating server directory: %w", err)
		}
	}

	for attempt := 1; ; attempt++ {
		port, perr := freePort()
		if perr != nil {
			err = perr
			break
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var p *process
		if p, err = s.start(); err == nil {
			s.proc = p
			return s, nil
		}
		if !errors.Is(err, errPortInUse) || attempt == bindAttempts {
			break
		}
	}
	if s.ownDir {
		_ = os.RemoveAll(s.dir)
	}
	return nil, err
}

// Addr returns the server's "127.0.0.1:PORT" address. It does not change
// across Restart.
func (s *Server) Addr() string { return s.addr }

// Dir returns the server's working directory, which holds its AOF files
// and its log (redis.log).
func (s *Server) Dir() string { return s.dir }

// Client returns a go-redis client for this server, created on first use
// and closed by Close (after Close it returns a closed client). It has
// ContextTimeoutEnabled set, so context deadlines bound its commands, and
// otherwise go-redis defaults (including retries), which suits inspecting
// the server rather than exercising failure handling.
func (s *Server) Client() *redis.Client {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client == nil {
		s.client = redis.NewClient(&redis.Options{
			Addr:                  s.addr,
			ContextTimeoutEnabled: true,
		})
		if s.closed {
			_ = s.client.Close()
		}
	}
	return s.client
}

// PID returns the process ID of the server's last started process.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.pid
}

// Running reports whether the server process is alive (a paused server is
// running).
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil && !s.proc.exited()
}

// Kill sends SIGKILL and waits for the process to exit. Without AOF all
// data is lost. Killing a server that is not running is a no-op.
func (s *Server) Kill() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.killLocked()
}

func (s *Server) killLocked() error {
	p := s.proc
	if p == nil || p.exited() {
		return nil
	}
	if err := p.os.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("redistest: killing redis-server %s (pid %d): %w", s.addr, p.pid, err)
	}
	if !waitDone(p.done, exitTimeout) {
		return fmt.Errorf("redistest: redis-server %s (pid %d) did not exit within %v of SIGKILL", s.addr, p.pid, exitTimeout)
	}
	return nil
}

// Stop shuts the server down gracefully and waits for it to exit: SHUTDOWN
// NOSAVE, or SIGTERM (followed by SIGCONT) if the server is paused or does
// not accept the command. Either way the AOF, if enabled, is flushed. If
// the server has not exited within 10s it is killed and an error is
// returned. Stopping a server that is not running is a no-op.
func (s *Server) Stop() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil || p.exited() {
		return nil
	}
	// SHUTDOWN NOSAVE takes effect at once; SIGTERM is only acted on by
	// the next serverCron tick (up to 100ms) and is the fallback for a
	// paused or unresponsive server.
	if s.paused || shutdown(s.addr) != nil {
		if err := p.os.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("redistest: stopping redis-server %s (pid %d): %w", s.addr, p.pid, err)
		}
		_ = p.os.Signal(syscall.SIGCONT) // a stopped process acts on SIGTERM only once continued
	}
	s.paused = false
	if waitDone(p.done, exitTimeout) {
		return nil
	}
	if err := s.killLocked(); err != nil {
		return err
	}
	return fmt.Errorf("redistest: redis-server %s (pid %d) ignored SIGTERM for %v; killed it", s.addr, p.pid, exitTimeout)
}

// Restart starts the server again on the same port and directory, killing
// it first if it is running, and waits until it answers PING. With AOF the
// data written before a Kill or Stop is loaded again. The Faketime spec set
// by SetFaketime takes effect here. Restart fails if another process has
// taken the port in the meantime.
func (s *Server) Restart() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("redistest: Restart of closed server %s", s.addr)
	}
	if err := s.killLocked(); err != nil {
		return err
	}
	p, err := s.start()
	if err != nil {
		return err
	}
	s.proc, s.paused = p, false
	return nil
}

// Pause freezes the server with SIGSTOP and returns once all its threads are
// stopped. A paused server still accepts TCP connections (the kernel
// completes the handshake) but answers nothing until Resume.
func (s *Server) Pause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.runningLocked("Pause")
	if err != nil {
		return err
	}
	if err := p.os.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("redistest: pausing redis-server %s (pid %d): %w", s.addr, p.pid, err)
	}
	s.paused = true
	if err := waitStopped(p.pid, p.done, exitTimeout); err != nil {
		return fmt.Errorf("redistest: pausing redis-server %s (pid %d): %w", s.addr, p.pid, err)
	}
	return nil
}

// Resume continues a paused server with SIGCONT. Resuming a server that is
// not paused is harmless.
func (s *Server) Resume() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.runningLocked("Resume")
	if err != nil {
		return err
	}
	if err := p.os.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("redistest: resuming redis-server %s (pid %d): %w", s.addr, p.pid, err)
	}
	s.paused = false
	return nil
}

func (s *Server) runningLocked(op string) (*process, error) {
	if s.proc == nil || s.proc.exited() {
		return nil, fmt.Errorf("redistest: %s: redis-server %s is not running", op, s.addr)
	}
	return s.proc, nil
}

// SetFaketime sets the FAKETIME spec used from the next Restart on; ""
// runs the server with the real clock.
func (s *Server) SetFaketime(spec string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faketime = spec
}

// SetClockOffset steps the wall clock of a LiveClock server to the real time plus d while it
// runs, and returns once the server's TIME shows it (within 250ms; libfaketime re-reads the
// offset once a second). Keys expire by the server's wall clock, so a forward step expires
// them early and a backward step keeps them longer. The offset also holds after Restart.
func (s *Server) SetClockOffset(d time.Duration) error {
	if !s.cfg.LiveClock {
		return fmt.Errorf("redistest: SetClockOffset on %s: start the server with Config.LiveClock", s.addr)
	}
	if err := writeClockSpec(filepath.Join(s.dir, clockName), fmt.Sprintf("%+.3fs", d.Seconds())); err != nil {
		return err
	}
	deadline := time.Now().Add(clockSettle)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
		t, err := s.Client().Time(ctx).Result()
		cancel()
		off := time.Until(t) - d
		if err == nil && off.Abs() < 250*time.Millisecond {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server %s did not take clock offset %v within %v (TIME: %v, %v)", s.addr, d, clockSettle, t, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// writeClockSpec replaces the libfaketime spec file at path atomically.
func writeClockSpec(path, spec string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(spec+"\n"), 0o644); err != nil {
		return fmt.Errorf("redistest: writing clock offset: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("redistest: writing clock offset: %w", err)
	}
	return nil
}

// Close kills the server if it is running, closes the client returned by
// Client and removes the temporary directory (if New created it). It is
// idempotent.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	errs = append(errs, s.killLocked())
	if s.client != nil {
		if err := s.client.Close(); err != nil {
			errs = append(errs, fmt.Errorf("redistest: closing client of %s: %w", s.addr, err))
		}
	}
	if s.ownDir {
		if err := os.RemoveAll(s.dir); err != nil {
			errs = append(errs, fmt.Errorf("redistest: removing server directory: %w", err))
		}
	}
	return errors.Join(errs...)
}

// args returns the redis-server command line for s.port.
func (s *Server) args() []string {
	args := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", filepath.Join(s.dir, logName),
		"--protected-mode", "no",
		"--daemonize", "no",
		"--save", "",
	}
	if s.cfg.AOF {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	return append(args, s.cfg.Args...)
}

// start runs one redis-server on s.port and waits until it is ready. On
// failure the process is killed and reaped. Called with s.mu held (or before
// s is shared).
func (s *Server) start() (*process, error) {
	env := os.Environ()
	if s.faketime != "" || s.cfg.LiveClock {
		preload, err := faketimePreload()
		if err != nil {
			return nil, err
		}
		env = append(withoutEnv(env, "LD_PRELOAD", "FAKETIME", "FAKETIME_DONT_FAKE_MONOTONIC", "FAKETIME_TIMESTAMP_FILE", "FAKETIME_CACHE_DURATION"),
			"LD_PRELOAD="+preload,
			"FAKETIME_DONT_FAKE_MONOTONIC=1",
		)
		if s.cfg.LiveClock {
			spec := filepath.Join(s.dir, clockName)
			if fileSize(spec) == 0 {
				if err := writeClockSpec(spec, cmp.Or(s.faketime, "+0")); err != nil {
					return nil, err
				}
			}
			env = append(env, "FAKETIME_TIMESTAMP_FILE="+spec, "FAKETIME_CACHE_DURATION=1")
		} else {
			env = append(env, "FAKETIME="+s.faketime)
		}
	}
	logOff := fileSize(filepath.Join(s.dir, logName))
	outOff := fileSize(filepath.Join(s.dir, stdoutName))

	out, err := os.OpenFile(filepath.Join(s.dir, stdoutName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redistest: opening redis-server output file: %w", err)
	}
	cmd := exec.Command(s.bin, s.args()...)
	if len(s.cfg.Wrap) > 0 {
		cmd = exec.Command(s.cfg.Wrap[0], append(slices.Clone(s.cfg.Wrap[1:]), cmd.Args...)...)
	}
	cmd.Dir = s.dir
	cmd.Env = env
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.SysProcAttr = sysProcAttr()

	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Start and reap the child from one locked OS thread; see the
		// package documentation (Pdeathsig). The thread is never
		// unlocked, so the runtime retires it when the child is reaped.
		lockThreadForChild()
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		p.os = cmd.Process
		p.pid = cmd.Process.Pid
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	err = <-started
	out.Close() // the child has its own descriptor
	if err != nil {
		return nil, fmt.Errorf("redistest: starting redis-server: %w", err)
	}

	if err := s.waitReady(p); err != nil {
		_ = p.os.Signal(syscall.SIGKILL)
		waitDone(p.done, exitTimeout)
		tail := s.logTail(logOff, outOff)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", err, errPortInUse)
		}
		return nil, fmt.Errorf("%w\n--- redis-server log tail (%s) ---\n%s", err, s.dir, tail)
	}
	return p, nil
}

// waitReady polls the server until it answers PING and INFO reports p's pid
// (so a foreign server that grabbed the port is not mistaken for ours).
func (s *Server) waitReady(p *process) error {
	deadline := time.Now().Add(startTimeout)
	delay := 500 * time.Microsecond
	for {
		err := probe(s.addr, p.pid)
		if err == nil {
			return nil
		}
		if errors.Is(err, errPortInUse) {
			return fmt.Errorf("redistest: starting redis-server on %s: %w", s.addr, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redistest: redis-server on %s (pid %d) did not answer PING within %v: %v", s.addr, p.pid, startTimeout, err)
		}
		t := time.NewTimer(delay)
		select {
		case <-p.done:
			t.Stop()
			return fmt.Errorf("redistest: redis-server on %s exited during startup (%v)", s.addr, p.err)
		case <-t.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
}

// probe sends PING and INFO server over a raw connection. It succeeds if
// PING answers +PONG and the server's process_id is pid.
func probe(addr string, pid int) error {
	c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(250 * time.Millisecond))
	if _, err := io.WriteString(c, "PING\r\nINFO server\r\n"); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING answered %q", line)
	}
	line, err = r.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "$")))
	if !strings.HasPrefix(line, "$") || err != nil || n < 0 {
		return fmt.Errorf("INFO answered %q", strings.TrimSpace(line))
	}
	info := make([]byte, n)
	if _, err := io.ReadFull(r, info); err != nil {
		return err
	}
	want := "process_id:" + strconv.Itoa(pid) + "\r"
	for _, l := range bytes.Split(info, []byte("\n")) {
		if string(l) == want {
			return nil
		}
	}
	return fmt.Errorf("a different process (not pid %d) answers on %s: %w", pid, addr, errPortInUse)
}

// shutdown sends SHUTDOWN NOSAVE over a raw connection. The server closes
// the connection without a reply when it accepts the command.
func shutdown(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 250*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(250 * time.Millisecond))
	if _, err := io.WriteString(c, "SHUTDOWN NOSAVE\r\n"); err != nil {
		return err
	}
	reply, err := bufio.NewReader(c).ReadString('\n')
	if err == io.EOF && reply == "" {
		return nil
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("SHUTDOWN NOSAVE answered %q", strings.TrimSpace(reply))
}

// logTail returns the end of what the server logged since the given
// offsets of its log file and its stdout/stderr file.
func (s *Server) logTail(logOff, outOff int64) string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		off  int64
	}{{logName, logOff}, {stdoutName, outOff}} {
		data, err := os.ReadFile(filepath.Join(s.dir, f.name))
		if err != nil || int64(len(data)) <= f.off {
			continue
		}
		data = data[f.off:]
		if len(data) > logTailBytes {
			data = data[len(data)-logTailBytes:]
		}
		fmt.Fprintf(&b, "[%s]\n%s", f.name, data)
		if !bytes.HasSuffix(data, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	if b.Len() == 0 {
		return "(empty)\n"
	}
	return b.String()
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redistest: finding a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, fmt.Errorf("redistest: finding a free port: %w", err)
	}
	return port, nil
}

// waitDone waits up to d for done to be closed and reports whether it was.
func waitDone(done <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// withoutEnv returns env without the given variables.
func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return slices.Contains(names, name)
	})
}

// NewN starts n servers like New, concurrently; with cfg.Dir, server i uses Dir/node<i>.
// If any cannot be started, the others are closed and the first error is returned. The
// caller must Close every server.
func NewN(n int, cfg Config) ([]*Server, error) {
	servers, errs := startEach(n, cfg, "node", New)
	for i, err := range errs {
		if err != nil {
			for _, s := range servers {
				if s != nil {
					_ = s.Close()
				}
			}
			return nil, fmt.Errorf("starting server %d of %d: %w", i, n, err)
		}
	}
	return servers, nil
}

// startEach calls start n times concurrently and returns what each call returned; call i gets
// cfg with, when cfg.Dir is set, the subdirectory Dir/<sub><i>.
func startEach[T any](n int, cfg Config, sub string, start func(Config) (T, error)) ([]T, []error) {
	out := make([]T, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		c := cfg
		if cfg.Dir != "" {
			c.Dir = filepath.Join(cfg.Dir, fmt.Sprintf("%s%d", sub, i))
		}
		wg.Go(func() { out[i], errs[i] = start(c) })
	}
	wg.Wait()
	return out, errs
}
