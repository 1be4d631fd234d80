package pgfence_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cronlock/cronlock/fence/pgfence"
	"github.com/cronlock/cronlock/internal/pgtest"
)

// BenchmarkWrite compares one write in a transaction with and without the check (one pgx
// connection, loopback, fsync off): the check's cost per write is the difference.
func BenchmarkWrite(b *testing.B) {
	ctx := context.Background()
	conn := connect(b, pgtest.Start(b).DSN)
	for _, stmt := range []string{pgfence.Schema(), `CREATE TABLE data (resource text PRIMARY KEY, value bigint NOT NULL)`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			b.Fatal(err)
		}
	}
	write := func(tx pgx.Tx, v int) error {
		_, err := tx.Exec(ctx, `INSERT INTO data VALUES ('r', $1) ON CONFLICT (resource) DO UPDATE SET value = $1`, v)
		return err
	}
	b.Run("unguarded", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if err := pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{}, func(tx pgx.Tx) error { return write(tx, i) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	var token uint64 // across the runs of b.Loop, which start again from 0
	b.Run("guarded", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			token++
			if err := pgfence.Write(ctx, conn, pgx.TxOptions{}, "r", token, func(tx pgx.Tx) error { return write(tx, i) }); err != nil {
				b.Fatal(err)
			}
		}
	})
}
