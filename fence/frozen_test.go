package fence_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/pgfence"
	"github.com/cronlock/cronlock/fence/redisfence"
	"github.com/cronlock/cronlock/internal/pgtest"
	"github.com/cronlock/cronlock/internal/redistest"
	"github.com/cronlock/cronlock/redlock"
)

const (
	// workerEnv makes the test binary the frozen worker (frozenWorker) instead of running tests.
	workerEnv = "FENCE_TEST_WORKER"
	lockKey   = "{frozen}:lock"
	resource  = "frozen"
	dataKey   = "{frozen}:value"
	lockTTL   = time.Second
)

func TestMain(m *testing.M) {
	if os.Getenv(workerEnv) != "" {
		if err := frozenWorker(os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

func env(name string) string { return os.Getenv(workerEnv + "_" + name) }

// frozenWorker takes the lock with a lease, checks the lease, says "checked TOKEN" and waits
// for a line on in (the test freezes it there); then it writes to Postgres and Redis with
// its token, whatever its lease says, as careless code does, and reports both answers.
func frozenWorker(in io.Reader, out io.Writer) error {
	ctx := context.Background()
	var nodes []redlock.Node
	for _, addr := range strings.Fields(env("NODES")) {
		nodes = append(nodes, redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true}))
	}
	lc, err := redlock.New(nodes, redlock.WithoutQuarantine())
	if err != nil {
		return err
	}
	defer lc.Close()
	lock, err := lc.Acquire(ctx, lockKey, lockTTL)
	if err != nil {
		return err
	}
	lease, err := lock.Lease(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = lease.Close(ctx) }()
	if err := lease.Err(); err != nil {
		return fmt.Errorf("lease lost before the check: %w", err)
	}
	token := lock.Token()
	fmt.Fprintf(out, "checked %d\n", token)
	if _, err := bufio.NewReader(in).ReadString('\n'); err != nil {
		return err
	}
	conn, err := pgx.Connect(ctx, env("PG"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	pgErr := pgfence.Write(ctx, conn, pgx.TxOptions{}, resource, token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET value = 'frozen', token = $1`, int64(token))
		return err
	})
	rdb := redis.NewClient(&redis.Options{Addr: env("DATA")})
	defer rdb.Close()
	redisErr := redisfence.Set(ctx, rdb, resource, token, dataKey, "frozen", 0)
	fmt.Fprintf(out, "postgres %v\nredis %v\n", pgErr, redisErr)
	return nil
}

// A worker frozen (SIGSTOP) after checking its lease, past its lock's TTL, while a successor
// takes the lock and writes, then resumed: Postgres and Redis refuse its write, and the
// successor's value stands.
func TestFrozenHolderIsRefusedByTheStores(t *testing.T) {
	ctx := context.Background()
	pg := pgtest.Start(t).DSN
	nodes := redistest.StartN(t, 3, redistest.Config{})
	data := redistest.Start(t, redistest.Config{}).Client()
	conn, err := pgx.Connect(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, stmt := range []string{pgfence.Schema(), `CREATE TABLE data (value text NOT NULL, token bigint NOT NULL)`, `INSERT INTO data VALUES ('none', 0)`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	var addrs []string
	var lockNodes []redlock.Node
	for _, n := range nodes {
		addrs = append(addrs, n.Addr())
		lockNodes = append(lockNodes, n.Client())
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"=1", workerEnv+"_NODES="+strings.Join(addrs, " "),
		workerEnv+"_PG="+pg, workerEnv+"_DATA="+data.Options().Addr)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := bufio.NewScanner(stdout)
	next := func() string {
		if !lines.Scan() {
			t.Fatalf("worker ended: %v", lines.Err())
		}
		return lines.Text()
	}
	frozenToken, err := strconv.ParseUint(strings.TrimPrefix(next(), "checked "), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	// The successor gets the lock once the frozen worker's lease has run out everywhere.
	lc, err := redlock.New(lockNodes, redlock.WithoutQuarantine())
	if err != nil {
		t.Fatal(err)
	}
	defer lc.Close()
	actx, cancel := context.WithTimeout(ctx, time.Minute) // bounds a broken test, not a wait
	defer cancel()
	lock, err := lc.Acquire(actx, lockKey, lockTTL)
	if err != nil {
		t.Fatalf("successor: %v", err)
	}
	defer func() { _ = lock.Release(ctx) }()
	token := lock.Token()
	if token <= frozenToken {
		t.Fatalf("successor's token %d not above the frozen worker's %d", token, frozenToken)
	}
	if err := pgfence.Write(ctx, conn, pgx.TxOptions{}, resource, token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE data SET value = 'successor', token = $1`, int64(token))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if err := redisfence.Set(ctx, data, resource, token, dataKey, "successor", 0); err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%v", &fence.StaleError{Resource: resource, Token: frozenToken, Stored: token})
	if got := next(); got != "postgres "+want {
		t.Errorf("frozen worker's Postgres write: %q, want refused: %q", got, want)
	}
	if got := next(); got != "redis "+want {
		t.Errorf("frozen worker's Redis write: %q, want refused: %q", got, want)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("worker: %v", err)
	}
	var v string
	if err := conn.QueryRow(ctx, `SELECT value FROM data`).Scan(&v); err != nil || v != "successor" {
		t.Errorf("Postgres value %q (%v), want successor", v, err)
	}
	if v := data.Get(ctx, dataKey).Val(); v != "successor" {
		t.Errorf("Redis value %q, want successor", v)
	}
}
