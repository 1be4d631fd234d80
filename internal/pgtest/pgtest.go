// Package pgtest runs real PostgreSQL servers for tests: initdb and pg_ctl in a fresh
// directory, the server on a free 127.0.0.1 port with trust authentication, stopped when the
// test ends.
//
// Postgres refuses to run as root. When the test runs as root, the server's files belong to
// the system user "postgres" (Debian's postgresql package creates it), or "nobody" if there is
// none, and initdb, pg_ctl and the server run as that user.
//
// The binaries are found on PATH, else in the newest /usr/lib/postgresql/<version>/bin
// (Debian's layout, which puts only wrappers on PATH). scripts/deps.sh installs them.
//
// pg_ctl starts the server as a daemon: a test binary killed before its cleanup leaves the
// server running until pg_ctl stop is run on its directory (/tmp/pgtest-*/data).
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// Server is one running PostgreSQL server.
type Server struct {
	// DSN is a connection string for the server's database "postgres" as user "postgres",
	// e.g. "postgres://postgres@127.0.0.1:PORT/postgres?sslmode=disable".
	DSN string
}

// Start runs a PostgreSQL server for t and returns once it accepts connections. It is
// stopped (pg_ctl stop -m immediate) and its directory removed when t ends. Start fails t
// when it cannot.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	cred, err := credential()
	if err != nil {
		t.Fatal(err)
	}
	// Not t.TempDir: its parents are private to root, and the server runs as another user.
	dir, err := os.MkdirTemp("", "pgtest-*")
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := run(cred, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync"); err != nil {
		t.Fatalf("pgtest: initdb: %v\n%s", err, out)
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			t.Fatalf("pgtest: %v", err)
		}
		// fsync off: a test server's data need not survive a crash of the machine.
		opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off "+
			"-c synchronous_commit=off -c full_page_writes=off -c max_connections=200", port, dir)
		logFile := filepath.Join(dir, "server.log")
		out, err := run(cred, filepath.Join(bin, "pg_ctl"), "-D", data, "-l", logFile, "-w",
			"-t", "60", "-o", opts, "start")
		if err == nil {
			t.Cleanup(func() {
				if out, err := run(cred, filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"); err != nil {
					t.Errorf("pgtest: pg_ctl stop: %v\n%s", err, out)
				}
			})
			return &Server{DSN: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)}
		}
		log, _ := os.ReadFile(logFile)
		if attempt == attempts || !strings.Contains(string(log), "could not bind") {
			t.Fatalf("pgtest: pg_ctl start: %v\n%s\n%s", err, out, log)
		}
	}
}

// binDir returns the directory of initdb and pg_ctl.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		// Debian's /usr/bin has no initdb, but a PATH may hold links to the real binaries.
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(p), "pg_ctl")); err == nil {
			return filepath.Dir(p), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	dirs = slices.DeleteFunc(dirs, func(d string) bool {
		_, err := os.Stat(filepath.Join(d, "initdb"))
		return err != nil
	})
	if len(dirs) == 0 {
		return "", errors.New("pgtest: initdb and pg_ctl not found on PATH nor in /usr/lib/postgresql/*/bin: apt-get install postgresql (scripts/deps.sh)")
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
