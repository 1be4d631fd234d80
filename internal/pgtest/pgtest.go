// Package pgtest runs real PostgreSQL servers for tests: initdb in a fresh directory, then the
// server (postgres, as a child of the test) on a free 127.0.0.1 port with trust
// authentication, stopped when the test ends and killed if the test binary dies.
//
// Postgres refuses to run as root. When the test runs as root, the server's files belong to
// the system user "postgres" (Debian's postgresql package creates it), or "nobody" if there is
// none, and initdb and the server run as that user.
//
// The binaries are found on PATH, else in the newest /usr/lib/postgresql/<version>/bin
// (Debian's layout, which puts only wrappers on PATH). scripts/deps.sh installs them.
//
// The server's directory (/tmp/pgtest-*) is removed at cleanup; a test binary that dies
// leaves it behind.
package pgtest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

const (
	// startTimeout bounds how long Start waits for the server to accept connections.
	startTimeout = time.Minute
	// stopTimeout bounds how long cleanup waits for an immediate shutdown before SIGKILL.
	stopTimeout = 30 * time.Second
)

// Server is one running PostgreSQL server.
type Server struct {
	// DSN is a connection string for the server's database "postgres" as user "postgres",
	// e.g. "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable".
	DSN string

	dir  string   // initdb's data and the server's log and socket
	proc *process // nil until the server started
}

// Start runs a PostgreSQL server for t and returns once it accepts connections. It is
// stopped (immediate shutdown) and its directory removed when t ends. Start fails t
// when it cannot.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// New is Start for a caller that is not a test (the chaos harness, internal/chaos): it runs a
// server and returns once it accepts connections; Close stops it and removes its directory.
func New() (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	// Not t.TempDir: its parents are private to root, and the server runs as another user.
	dir, err := os.MkdirTemp("", "pgtest-*")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	s := &Server{dir: dir}
	if err := s.start(bin, cred); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// start runs initdb in s.dir, then the server on a free port (another if the port was taken
// meanwhile).
func (s *Server) start(bin string, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(s.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(s.dir, "data")
	if out, err := run(cred, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		proc, err := start(bin, cred, s.dir, data, port)
		if err == nil {
			s.proc = proc
			s.DSN = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			return nil
		}
		log, _ := os.ReadFile(filepath.Join(s.dir, "server.log"))
		if attempt == attempts || !strings.Contains(string(log), "could not bind") {
			return fmt.Errorf("pgtest: starting postgres: %w\n%s", err, log)
		}
	}
}

// Close stops the server (immediate shutdown), waits until it has exited and removes its
// directory.
func (s *Server) Close() {
	if s.proc != nil {
		s.proc.stop()
	}
	_ = os.RemoveAll(s.dir)
}

// process is a running postgres, reaped by the goroutine that started it.
type process struct {
	proc *os.Process
	done chan struct{} // closed once the process has been reaped
}

// start runs postgres on data and port, and returns once it accepts connections.
//
// The goroutine that starts postgres stays locked to its OS thread until postgres has been
// reaped: Pdeathsig fires when the thread that forked the child exits, so postgres is killed
// when the test binary dies (a timeout, a crash), not when some other thread ends. The
// server's own children exit when they see their postmaster gone.
func start(bin string, cred *syscall.Credential, dir, data string, port int) (*process, error) {
	logFile, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// fsync off: a test server's data need not survive a crash of the machine.
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data, "-p", strconv.Itoa(port), "-k", dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=200")
	cmd.Dir, cmd.Stdout, cmd.Stderr = os.TempDir(), logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		defer close(p.done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	p.proc = cmd.Process
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for deadline := time.Now().Add(startTimeout); ; {
		conn, err := pgconn.Connect(context.Background(), "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=5")
		if err == nil {
			_ = conn.Close(context.Background())
			return p, nil
		}
		select {
		case <-p.done:
			return nil, errors.New("postgres exited before it accepted connections")
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("postgres does not accept connections after %v: %w", startTimeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop shuts postgres down at once (SIGQUIT, its immediate shutdown) and waits until it has
// been reaped, or kills it after stopTimeout.
func (p *process) stop() {
	_ = p.proc.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.proc.Kill()
		<-p.done
	}
}

// binDir returns the directory of initdb and postgres.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian's /usr/bin has no initdb, but a PATH may hold links to the real binaries.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "postgres")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	dirs = slices.DeleteFunc(dirs, func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "initdb"))
		return err != nil
	})
	if len(dirs) == 0 {
		return "", errors.New("pgtest: initdb and postgres not found on PATH nor in /usr/lib/postgresql/*/bin: apt-get install postgresql (scripts/deps.sh)")
	}
	version := func(d string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		return v
	}
	return slices.MaxFunc(dirs, func(a, b string) int { return cmp.Compare(version(a), version(b)) }), nil
}

// credential returns the user to run Postgres as: nil (the current user) unless that is root.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
	}
	return nil, errors.New("pgtest: running as root and neither user postgres nor nobody exists: Postgres refuses to run as root; create an unprivileged user")
}

func run(cred *syscall.Credential, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(context.Background(), name, args...)
	cmd.Dir = os.TempDir()
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	return cmd.CombinedOutput()
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
