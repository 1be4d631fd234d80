package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/proctest"
	"github.com/cronlock/cronlock/fence/pgfence"
	"github.com/cronlock/cronlock/internal/pgtest"
)

// The psql form of docs/locking.md, run by a daemon's shell job with CRONLOCK_FENCING_TOKEN:
// runs write with their tokens, in order; once a newer holder's token is in the fence table,
// a run's check refuses it, the run fails, and its write does not land.
func TestShellJobFencesAPostgresWrite(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).DSN
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, stmt := range []string{pgfence.Schema(), `CREATE TABLE runs (seq bigserial, token bigint NOT NULL)`} {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	d := startDaemon(t, "min_interval: 100ms\n", fmt.Sprintf(`  - name: export
    schedule: "@every 300ms"
    command:
      - sh
      - -c
      - |
        psql %q -v ON_ERROR_STOP=1 -v token="$CRONLOCK_FENCING_TOKEN" <<'SQL'
        BEGIN;
        INSERT INTO cronlock_fence AS f (resource, token) VALUES ('export', :token)
        ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
        WHERE f.token <= EXCLUDED.token RETURNING f.token \gset
        INSERT INTO runs (token) VALUES (:token);
        COMMIT;
        SQL
`, dsn))
	count := func() (n int) {
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM runs`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	proctest.Eventually(t, "three fenced runs", func() bool { return count() >= 3 })
	rows, err := conn.Query(ctx, `SELECT token FROM runs ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("run %d wrote token %d after %d", i, tokens[i], tokens[i-1])
		}
	}

	// A newer holder's token: this commits after any run's transaction in flight (it waits
	// for the fence row), so every run that checks afterwards is refused.
	if _, err := conn.Exec(ctx, `UPDATE cronlock_fence SET token = $1 WHERE resource = 'export'`, int64(math.MaxInt64)); err != nil {
		t.Fatal(err)
	}
	before := count()
	proctest.Eventually(t, "a run refused by the fence", func() bool {
		code, out, _ := runCLI(t, "history", "export", "--config", d.cfg, "-n", "3")
		return code == 0 && strings.Contains(out, "no rows returned for \\gset")
	})
	if n := count(); n != before {
		t.Fatalf("%d runs wrote after the newer holder's token, want none", n-before)
	}
}
