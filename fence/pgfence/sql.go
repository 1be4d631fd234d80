package pgfence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/cronlock/cronlock/fence/internal/fencearg"
)

// CheckSQL is Check for database/sql, with any driver that speaks to PostgreSQL (pgx's stdlib,
// lib/pq…): it raises resource's stored token to token inside tx, or returns a
// *fence.StaleError and aborts tx. Check says how it behaves.
func CheckSQL(ctx context.Context, tx *sql.Tx, resource string, token uint64) error {
	if tx == nil {
		return errors.New("fence: tx is nil: pass the transaction that makes the guarded writes (db.BeginTx)")
	}
	if err := fencearg.Check(resource, token, MaxToken); err != nil {
		return err
	}
	return check(ctx, func(ctx context.Context, sql string, args ...any) row { return tx.QueryRowContext(ctx, sql, args...) },
		func(ctx context.Context, sql string) error { _, err := tx.ExecContext(ctx, sql); return err }, resource, token)
}

// WriteSQL is Write for database/sql: it begins a transaction of db with opts (nil for the
// driver's defaults), checks token with CheckSQL, calls fn and commits, or rolls back when
// the check, fn or ctx fails. Write says how it behaves.
func WriteSQL(ctx context.Context, db *sql.DB, opts *sql.TxOptions, resource string, token uint64, fn func(*sql.Tx) error) error {
	if db == nil {
		return errors.New("fence: db is nil: pass the *sql.DB of the database the writes go to")
	}
	if err := writeArgs(resource, token, fn == nil); err != nil {
		return err
	}
	tx, err := db.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("fence: beginning a transaction for resource %q: %w", resource, err)
	}
	return inTx(func() error { return CheckSQL(ctx, tx, resource, token) }, func() error { return fn(tx) },
		tx.Commit, tx.Rollback)
}
