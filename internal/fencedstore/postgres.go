package fencedstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/pgfence"
)

// The Postgres fenced store: package pgfence's check on a real server instead of Script, for
// the chaos suite's runs with -chaos.fence=postgres. The store refuses a stale write itself
// (pgfence.Check in the write's transaction, resource = the job's name), and every write is
// logged in the table writes: an accepted one in the transaction that passed the check, so
// that the log's seq orders the accepted writes as they committed (the fence row is locked
// from the check to the commit); a refused one after its transaction rolled back.

// PostgresSchema creates the Postgres store's tables: pgfence's fence table and the log.
var PostgresSchema = pgfence.Schema() + `
CREATE TABLE writes (
    seq      bigserial PRIMARY KEY,
    job      text      NOT NULL,
    accepted boolean   NOT NULL,
    token    bigint    NOT NULL,
    replica  text      NOT NULL,
    tick_ms  bigint    NOT NULL,
    at_ns    bigint    NOT NULL
);`

// logWrite logs one write: job, accepted, token, replica, tick (Unix ms), at (Unix ns).
const logWrite = `INSERT INTO writes (job, accepted, token, replica, tick_ms, at_ns) VALUES ($1, $2, $3, $4, $5, $6)`

// WritePostgres writes token for job to the Postgres store at conn, through pgfence's check,
// and logs it; it reports whether the store accepted it. replica, tick and at are logged
// with it.
func WritePostgres(ctx context.Context, conn *pgx.Conn, job string, token uint64, replica string, tick, at time.Time) (bool, error) {
	args := func(accepted bool) []any {
		return []any{job, accepted, int64(token), replica, tick.UnixMilli(), at.UnixNano()}
	}
	err := pgfence.Write(ctx, conn, pgx.TxOptions{}, job, token, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, logWrite, args(true)...)
		return err
	})
	if !errors.Is(err, fence.ErrStale) {
		return err == nil, err
	}
	if _, err := conn.Exec(ctx, logWrite, args(false)...); err != nil {
		return false, fmt.Errorf("logging a refused write: %w", err)
	}
	return false, nil
}

// PostgresWrite is one logged write of the Postgres store.
type PostgresWrite struct {
	Accepted bool
	Token    uint64
	Replica  string
	Tick, At time.Time
}

// PostgresWrites returns job's logged writes, in the order the store decided them.
func PostgresWrites(ctx context.Context, conn *pgx.Conn, job string) ([]PostgresWrite, error) {
	rows, err := conn.Query(ctx, `SELECT accepted, token, replica, tick_ms, at_ns FROM writes WHERE job = $1 ORDER BY seq`, job)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (PostgresWrite, error) {
		var (
			w            PostgresWrite
			token        int64
			tickMs, atNs int64
		)
		err := row.Scan(&w.Accepted, &token, &w.Replica, &tickMs, &atNs)
		w.Token, w.Tick, w.At = uint64(token), time.UnixMilli(tickMs), time.Unix(0, atNs)
		return w, err
	})
}
