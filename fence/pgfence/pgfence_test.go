package pgfence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/pgfence"
	"github.com/cronlock/cronlock/internal/pgtest"
)

// setup starts a server with the fence table and a data table, and returns its DSN.
func setup(t *testing.T) string {
	t.Helper()
	dsn := pgtest.Start(t).DSN
	conn := connect(t, dsn)
	for _, stmt := range []string{pgfence.Schema(),
		`CREATE TABLE data (resource text PRIMARY KEY, value text NOT NULL, token bigint NOT NULL)`,
		// writes is the log of committed writes: the fence row lock orders fenced
		// transactions of one resource from their checks on, so seq is their commit order.
		`CREATE TABLE writes (seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`,
	} {
		if _, err := conn.Exec(context.Background(), stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	return dsn
}

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// put is the guarded write of the tests: the resource's value and token, and a log line.
func put(ctx context.Context, tx pgx.Tx, resource, value string, token uint64) error {
	if _, err := tx.Exec(ctx, `INSERT INTO data VALUES ($1, $2, $3) ON CONFLICT (resource) DO UPDATE SET value = $2, token = $3`, resource, value, int64(token)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO writes (resource, token) VALUES ($1, $2)`, resource, int64(token))
	return err
}

func value(t *testing.T, conn *pgx.Conn, resource string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), `SELECT value FROM data WHERE resource = $1`, resource).Scan(&v); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return v
}

func storedToken(t *testing.T, conn *pgx.Conn, resource string) uint64 {
	t.Helper()
	var tok int64
	if err := conn.QueryRow(context.Background(), `SELECT token FROM cronlock_fence WHERE resource = $1`, resource).Scan(&tok); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatal(err)
	}
	return uint64(tok)
}

// writer is one way to make a fenced write: pgx or database/sql.
type writer struct {
	name  string
	write func(ctx context.Context, resource, value string, token uint64) error
}

func writers(t *testing.T, dsn string) []writer {
	conn := connect(t, dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return []writer{
		{"pgx", func(ctx context.Context, resource, value string, token uint64) error {
			return pgfence.Write(ctx, conn, pgx.TxOptions{}, resource, token, func(tx pgx.Tx) error { return put(ctx, tx, resource, value, token) })
		}},
		{"database/sql", func(ctx context.Context, resource, value string, token uint64) error {
			return pgfence.WriteSQL(ctx, db, nil, resource, token, func(tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO data VALUES ($1, $2, $3) ON CONFLICT (resource) DO UPDATE SET value = $2, token = $3`, resource, value, int64(token))
				return err
			})
		}},
	}
}

var _ = stdlib.GetDefaultDriver // registers the "pgx" database/sql driver

func TestWriteRefusesALowerToken(t *testing.T) {
	dsn := setup(t)
	conn := connect(t, dsn)
	ctx := context.Background()
	for _, w := range writers(t, dsn) {
		t.Run(w.name, func(t *testing.T) {
			r := "job-" + w.name
			if err := w.write(ctx, r, "ten", 10); err != nil {
				t.Fatal(err)
			}
			err := w.write(ctx, r, "five", 5)
			var stale *fence.StaleError
			if !errors.Is(err, fence.ErrStale) || !errors.As(err, &stale) || *stale != (fence.StaleError{Resource: r, Token: 5, Stored: 10}) {
				t.Fatalf("write with token 5 after 10: %v, want a StaleError{%s 5 10}", err, r)
			}
			if v := value(t, conn, r); v != "ten" {
				t.Fatalf("value %q after a refused write, want ten", v)
			}
			if err := w.write(ctx, r, "ten again", 10); err != nil {
				t.Fatalf("equal token: %v, want it to pass (the same holder writing again)", err)
			}
			if err := w.write(ctx, r, "eleven", 11); err != nil {
				t.Fatal(err)
			}
			if v, tok := value(t, conn, r), storedToken(t, conn, r); v != "eleven" || tok != 11 {
				t.Fatalf("value %q token %d, want eleven 11", v, tok)
			}
		})
	}
}

// A caller that ignores the check's error and commits still commits nothing.
func TestRefusedTransactionCommitsNothing(t *testing.T) {
	dsn := setup(t)
	conn := connect(t, dsn)
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `INSERT INTO cronlock_fence (resource, token) VALUES ('r', 10)`); err != nil {
		t.Fatal(err)
	}
	t.Run("pgx", func(t *testing.T) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if err := put(ctx, tx, "r", "stale before the check", 5); err != nil {
			t.Fatal(err)
		}
		if err := pgfence.Check(ctx, tx, "r", 5); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("Check: %v, want ErrStale", err)
		}
		if err := tx.Commit(ctx); err == nil {
			t.Fatal("Commit after a refused check returned nil, want an error (the transaction rolls back)")
		}
	})
	t.Run("database/sql", func(t *testing.T) {
		db, err := sql.Open("pgx", dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback() }()
		if _, err := tx.ExecContext(ctx, `INSERT INTO data VALUES ('r', 'stale, sql', 5)`); err != nil {
			t.Fatal(err)
		}
		if err := pgfence.CheckSQL(ctx, tx, "r", 5); !errors.Is(err, fence.ErrStale) {
			t.Fatalf("CheckSQL: %v, want ErrStale", err)
		}
		if err := tx.Commit(); err == nil {
			t.Fatal("Commit after a refused check returned nil, want an error (the transaction rolls back)")
		}
	})
	var n int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM data) + (SELECT count(*) FROM writes)`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows written by refused transactions (%v), want 0", n, err)
	}
	if tok := storedToken(t, conn, "r"); tok != 10 {
		t.Fatalf("stored token %d, want 10", tok)
	}
}

func TestBadInputWritesNothing(t *testing.T) {
	dsn := setup(t)
	conn := connect(t, dsn)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	noop := func(pgx.Tx) error { return nil }
	for _, c := range []struct {
		name string
		err  error
		want string
	}{
		{"token 0", pgfence.Check(ctx, tx, "r", 0), "token for resource \"r\" is 0: pass the run's fencing token"},
		{"token past bigint", pgfence.Check(ctx, tx, "r", math.MaxInt64+1), "token 9223372036854775808 for resource \"r\" is past what the store holds (at most 9223372036854775807)"},
		{"empty resource", pgfence.Check(ctx, tx, "", 1), "resource is empty: name the data"},
		{"nil tx", pgfence.Check(ctx, nil, "r", 1), "tx is nil"},
		{"typed nil tx", pgfence.Check(ctx, (*nilTx)(nil), "r", 1), "tx is nil"},
		{"typed nil db", pgfence.Write(ctx, (*pgx.Conn)(nil), pgx.TxOptions{}, "r", 1, noop), "db is nil"},
		{"nil sql tx", pgfence.CheckSQL(ctx, nil, "r", 1), "tx is nil"},
		{"sql token 0", pgfence.CheckSQL(ctx, &sql.Tx{}, "r", 0), "is 0"},
		{"nil db", pgfence.Write(ctx, nil, pgx.TxOptions{}, "r", 1, noop), "db is nil"},
		{"nil fn", pgfence.Write(ctx, conn, pgx.TxOptions{}, "r", 1, nil), "fn is nil"},
		{"Write token 0", pgfence.Write(ctx, conn, pgx.TxOptions{}, "r", 0, noop), "is 0"},
		{"nil sql db", pgfence.WriteSQL(ctx, nil, nil, "r", 1, func(*sql.Tx) error { return nil }), "db is nil"},
		{"WriteSQL empty resource", pgfence.WriteSQL(ctx, db, nil, "", 1, func(*sql.Tx) error { return nil }), "resource is empty"},
	} {
		if c.err == nil || !strings.Contains(c.err.Error(), c.want) || errors.Is(c.err, fence.ErrStale) {
			t.Errorf("%s: %v, want an error containing %q", c.name, c.err, c.want)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("the caller's transaction after bad input: %v, want it usable", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM cronlock_fence`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d fence rows after bad input (%v), want 0", n, err)
	}
}

// waitBlocked waits until a backend other than conn's waits for a lock.
func waitBlocked(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no backend waits for a lock after 1m")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A writer whose check waits behind a newer holder's uncommitted transaction is refused once
// that holder commits: as stale under READ COMMITTED, with a serialization failure under
// REPEATABLE READ and SERIALIZABLE (and as stale when it runs again).
func TestWriterBlockedBehindANewerHolderSeesItsToken(t *testing.T) {
	dsn := setup(t)
	ctx := context.Background()
	for _, c := range []struct {
		iso      pgx.TxIsoLevel
		existing bool // the resource has a fence row before both
	}{{pgx.ReadCommitted, true}, {pgx.ReadCommitted, false}, {pgx.RepeatableRead, true}, {pgx.RepeatableRead, false},
		{pgx.Serializable, true}, {pgx.Serializable, false}} {
		t.Run(fmt.Sprintf("%s/existing=%v", c.iso, c.existing), func(t *testing.T) {
			r := fmt.Sprintf("r-%s-%v", c.iso, c.existing)
			newer, older, watch := connect(t, dsn), connect(t, dsn), connect(t, dsn)
			if c.existing {
				if err := pgfence.Write(ctx, newer, pgx.TxOptions{}, r, 5, func(pgx.Tx) error { return nil }); err != nil {
					t.Fatal(err)
				}
			}
			opts := pgx.TxOptions{IsoLevel: c.iso}
			tx, err := newer.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := pgfence.Check(ctx, tx, r, 20); err != nil {
				t.Fatal(err)
			}
			if err := put(ctx, tx, r, "newer", 20); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				done <- pgfence.Write(ctx, older, opts, r, 10, func(tx pgx.Tx) error { return put(ctx, tx, r, "older", 10) })
			}()
			waitBlocked(t, watch)
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-done
			var pgErr *pgconn.PgError
			serialization := errors.As(err, &pgErr) && pgErr.Code == "40001"
			switch {
			case errors.Is(err, fence.ErrStale):
			case c.iso != pgx.ReadCommitted && serialization:
				// The caller runs the transaction again, and is refused.
				err = pgfence.Write(ctx, older, opts, r, 10, func(tx pgx.Tx) error { return put(ctx, tx, r, "older", 10) })
				if !errors.Is(err, fence.ErrStale) {
					t.Fatalf("older writer retried after a serialization failure: %v, want ErrStale", err)
				}
			default:
				t.Fatalf("older writer: %v, want ErrStale%s", err, map[bool]string{true: " or a serialization failure"}[c.iso != pgx.ReadCommitted])
			}
			if v, tok := value(t, watch, r), storedToken(t, watch, r); v != "newer" || tok != 20 {
				t.Fatalf("value %q token %d, want newer 20", v, tok)
			}
		})
	}
}

// Many writers with interleaved tokens: the stored token never goes down and no write with a
// lower token commits after one with a higher token did, at READ COMMITTED, REPEATABLE READ
// and SERIALIZABLE (where a writer that met a serialization failure runs its transaction
// again, as callers do).
func TestConcurrentWritersNeverGoBack(t *testing.T) {
	dsn := setup(t)
	ctx := context.Background()
	const writers, writes = 6, 40
	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		t.Run(string(iso), func(t *testing.T) {
			r := "r-" + string(iso)
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			var mu sync.Mutex
			accepted, refused, retried := 0, 0, 0
			for w := range writers {
				conn := connect(t, dsn)
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for i := range writes {
						// Rising with the writes, interleaved across the writers: some pass,
						// some are refused.
						token := 1 + uint64(i)*writers + rng.Uint64N(4*writers)
						for {
							err := pgfence.Write(ctx, conn, pgx.TxOptions{IsoLevel: iso}, r, token, func(tx pgx.Tx) error { return put(ctx, tx, r, "v", token) })
							var pgErr *pgconn.PgError
							if errors.As(err, &pgErr) && pgErr.Code == "40001" {
								mu.Lock()
								retried++
								mu.Unlock()
								continue
							}
							mu.Lock()
							switch {
							case err == nil:
								accepted++
							case errors.Is(err, fence.ErrStale):
								refused++
							default:
								mu.Unlock()
								errs <- err
								return
							}
							mu.Unlock()
							break
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			conn := connect(t, dsn)
			rows, err := conn.Query(ctx, `SELECT token FROM writes WHERE resource = $1 ORDER BY seq`, r)
			if err != nil {
				t.Fatal(err)
			}
			tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			for i := 1; i < len(tokens); i++ {
				if tokens[i] < tokens[i-1] {
					t.Fatalf("write %d committed token %d after token %d had committed", i, tokens[i], tokens[i-1])
				}
			}
			if len(tokens) != accepted || refused == 0 {
				t.Fatalf("%d writes logged, %d accepted, %d refused: want as many logged as accepted, and some refused", len(tokens), accepted, refused)
			}
			if tok := storedToken(t, conn, r); int64(tok) != tokens[len(tokens)-1] {
				t.Fatalf("stored token %d, last committed %d", tok, tokens[len(tokens)-1])
			}
			t.Logf("%d accepted, %d refused, %d serialization failures retried", accepted, refused, retried)
		})
	}
}

// A panic in the caller's writes rolls the transaction back: the connection is usable and
// nothing was written.
func TestWriteRollsBackOnPanic(t *testing.T) {
	dsn := setup(t)
	conn := connect(t, dsn)
	ctx := context.Background()
	func() {
		defer func() {
			if p := recover(); p != "boom" {
				t.Fatalf("recovered %v, want the caller's panic", p)
			}
		}()
		_ = pgfence.Write(ctx, conn, pgx.TxOptions{}, "r", 1, func(tx pgx.Tx) error {
			if err := put(ctx, tx, "r", "panicked", 1); err != nil {
				return err
			}
			panic("boom")
		})
	}()
	if err := pgfence.Write(ctx, conn, pgx.TxOptions{}, "r", 2, func(tx pgx.Tx) error { return put(ctx, tx, "r", "after", 2) }); err != nil {
		t.Fatalf("the connection after a panic: %v", err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM writes WHERE token = 1`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d rows of the panicked write (%v), want 0", n, err)
	}
}

// nilTx is a pgx.Tx implementation whose nil pointer a caller may pass by mistake.
type nilTx struct{ pgx.Tx }
