package pgfence

import (
	"context"
	"database/sql"
	_ "embed" // schema.sql
	"errors"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/internal/fencearg"
)

//go:embed schema.sql
var schema string

// MaxToken is the largest token the fence table holds (its token column is a bigint). A
// larger token is refused with an error; cronlock's tokens, microseconds since the Unix epoch
// and counted up from there, stay far below it.
const MaxToken = math.MaxInt64

// Schema returns the DDL of the fence table cronlock_fence (the file schema.sql of this
// package): CREATE TABLE IF NOT EXISTS, to run once before the first Check, e.g. as a
// migration or with conn.Exec(ctx, pgfence.Schema()). The table lives in the first schema of
// the connection's search_path.
func Schema() string { return schema }

const (
	// raise writes token unless the stored one is higher. On a conflict the row is locked,
	// then the WHERE clause is evaluated on its latest committed version (READ COMMITTED), so
	// a writer that waited behind a newer holder's transaction compares with that holder's
	// token once it commits. No row returned: the stored token is higher.
	raise = `INSERT INTO cronlock_fence AS f (resource, token) VALUES ($1, $2)
ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
WHERE f.token <= EXCLUDED.token
RETURNING f.token`
	// stored reads the token that refused a write; raise locked its row.
	stored = `SELECT token FROM cronlock_fence WHERE resource = $1`
	// abort fails the transaction of a refused write, so that committing it rolls it back.
	abort = `DO $$BEGIN RAISE EXCEPTION 'cronlock fence: stale token, transaction aborted' USING ERRCODE = 'P0001'; END$$`
)

// row is what QueryRow returns, in pgx and in database/sql.
type row interface{ Scan(dest ...any) error }

// check runs raise through queryRow, and returns a *fence.StaleError when it refused token,
// having aborted the transaction with exec.
func check(ctx context.Context, queryRow func(ctx context.Context, sql string, args ...any) row, exec func(ctx context.Context, sql string) error, resource string, token uint64) error {
	var got int64
	err := queryRow(ctx, raise, resource, int64(token)).Scan(&got)
	if err == nil {
		return nil
	}
	// pgx.ErrNoRows matches sql.ErrNoRows.
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("fence: checking token %d for resource %q: %w", token, resource, err)
	}
	if err := queryRow(ctx, stored, resource).Scan(&got); err != nil {
		return fmt.Errorf("fence: token %d for resource %q is stale; reading the stored token: %w", token, resource, err)
	}
	// Its error is the point; any other (a lost connection) aborts the transaction as well.
	_ = exec(ctx, abort)
	return &fence.StaleError{Resource: resource, Token: token, Stored: uint64(got)}
}

// Check raises resource's stored token to token inside tx, unless the store holds a higher
// one: then it returns a *fence.StaleError (matching fence.ErrStale) and aborts tx, so that
// none of its writes land (committing it rolls it back); roll it back. A token equal to the stored one passes: it is the
// same holder writing again. Call it in the transaction that makes the writes it guards,
// before or after them, and commit only if it returned nil.
//
// The row of resource stays locked until tx ends, so fenced writers of one resource are
// serialised: one that waits behind a newer holder's transaction sees that holder's token
// when it commits, and is refused. That holds at every isolation level; under REPEATABLE READ
// and SERIALIZABLE the waiter gets a serialization failure (SQLSTATE 40001) instead, which is
// not fence.ErrStale: roll back and run the whole transaction again, as for any serialization
// failure; the retry then sees the newer token and is refused.
//
// Bad arguments (a nil tx, an empty resource, token 0 or above MaxToken) return an error
// that says which and how to fix it, and nothing is written.
func Check(ctx context.Context, tx pgx.Tx, resource string, token uint64) error {
	if fencearg.Nil(tx) {
		return errors.New("fence: tx is nil: pass the transaction that makes the guarded writes (conn.Begin)")
	}
	if err := fencearg.Check(resource, token, MaxToken); err != nil {
		return err
	}
	return check(ctx, func(ctx context.Context, sql string, args ...any) row { return tx.QueryRow(ctx, sql, args...) },
		func(ctx context.Context, sql string) error { _, err := tx.Exec(ctx, sql); return err }, resource, token)
}

// Beginner starts transactions: *pgx.Conn and *pgxpool.Pool are Beginners.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Write runs fn in a transaction of db started with opts, guarded by Check: it begins the
// transaction, checks token, calls fn and commits. If the check refuses token (an error
// matching fence.ErrStale), fn is not called; if the check or fn fails, or ctx ends, the
// transaction is rolled back and nothing is written; if fn panics, the transaction is rolled
// back before the panic goes on. fn must not commit or roll back tx.
// A serialization failure (SQLSTATE 40001, under REPEATABLE READ or SERIALIZABLE) is
// returned as is: call Write again.
func Write(ctx context.Context, db Beginner, opts pgx.TxOptions, resource string, token uint64, fn func(pgx.Tx) error) error {
	if fencearg.Nil(db) {
		return errors.New("fence: db is nil: pass a *pgx.Conn or *pgxpool.Pool")
	}
	if err := writeArgs(resource, token, fn == nil); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("fence: beginning a transaction for resource %q: %w", resource, err)
	}
	return inTx(func() error { return Check(ctx, tx, resource, token) }, func() error { return fn(tx) },
		func() error { return tx.Commit(ctx) }, func() error { return tx.Rollback(ctx) })
}

// writeArgs checks the arguments Write and WriteSQL share.
func writeArgs(resource string, token uint64, fnNil bool) error {
	if fnNil {
		return errors.New("fence: fn is nil: pass the function that makes the guarded writes")
	}
	return fencearg.Check(resource, token, MaxToken)
}

// inTx runs check and fn in a transaction, then commits; it rolls back when one fails, or
// panics (then the panic goes on).
func inTx(check, fn, commit, rollback func() error) error {
	ended := false
	defer func() {
		if !ended {
			_ = rollback()
		}
	}()
	if err := check(); err != nil {
		ended = true
		return errors.Join(err, rollback())
	}
	if err := fn(); err != nil {
		ended = true
		return errors.Join(err, rollback())
	}
	ended = true
	return commit()
}
