//go:build linux

package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/internal/fencedstore"
	"github.com/cronlock/cronlock/internal/pgtest"
)

// postgresStore starts a Postgres server with the Postgres store's tables, and returns its
// DSN and a connection to it.
func postgresStore(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Start(t).DSN
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(ctx) })
	_, err = conn.Exec(ctx, fencedstore.PostgresSchema)
	require.NoError(t, err)
	return dsn, conn
}

// The checker's fenced-store check on the Postgres store's log, as a chaos run with
// PostgresStore reads it: the store refuses a stale write itself, and a store that does not
// (its fence forgotten before each write, as if the check were removed) is caught.
func TestCheckReadsThePostgresStore(t *testing.T) {
	ctx := context.Background()
	dsn, conn := postgresStore(t)

	// Each case writes tokens 1, 3 and 2 for job f (2 from a holder that lost its lease to 3's).
	check := func(t *testing.T, broken bool) *Result {
		_, err := conn.Exec(ctx, `TRUNCATE writes, cronlock_fence`)
		require.NoError(t, err)
		d := clean()
		for i, token := range []uint64{1, 3, 2} {
			if broken {
				_, err := conn.Exec(ctx, `DELETE FROM cronlock_fence`)
				require.NoError(t, err)
			}
			run := &d.Runs[i]
			ok, err := fencedstore.WritePostgres(ctx, conn, run.Job, token, run.Replica, run.Tick, run.End)
			require.NoError(t, err)
			run.Write = fencedstore.Answer(ok)
		}
		d.Accepted, d.Rejected, err = readPostgresWrites(ctx, dsn, []string{"f"})
		require.NoError(t, err)
		return Check(params(3), timeline(), d)
	}

	t.Run("checked", func(t *testing.T) {
		r := check(t, false)
		assert.Equal(t, 2, r.Accepted)
		assert.Equal(t, 1, r.Refused)
		assert.Zero(t, r.StaleAccepted)
		assert.True(t, r.OK(), "%v", r.Violations)
	})
	t.Run("check removed", func(t *testing.T) {
		r := check(t, true)
		assert.Equal(t, 3, r.Accepted)
		assert.Equal(t, 1, r.StaleAccepted, "token 2 accepted after 3")
		assert.False(t, r.OK())
	})
}

// The daemon workers' psql write (pgWrite, part of runScript) as a run's shell runs it: the
// store accepts tokens 50 and 100, refuses 70, and logs the three in that order. In a chaos
// run the daemon kills a run whose lease ended before it writes, so its refusal path is
// tested here.
func TestDaemonWriteThroughPsql(t *testing.T) {
	ctx := context.Background()
	dsn, conn := postgresStore(t)
	for _, c := range []struct{ token, answer string }{{"50", "accepted|"}, {"100", "accepted|"}, {"70", "rejected|"}} {
		cmd := exec.Command("sh", "-c", "t=$TOKEN\n"+pgWrite+`echo "$write"`)
		cmd.Env = append(os.Environ(), "TOKEN="+c.token, "CHAOS_FENCED_PG="+dsn,
			"CRONLOCK_JOB=forbid", "CRONLOCK_REPLICA=d3", "CRONLOCK_TICK_UNIX_MS=1000")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "token %s: %s", c.token, out)
		assert.True(t, strings.HasPrefix(string(out), c.answer), "token %s: %q, want %s…", c.token, out, c.answer)
	}
	writes, err := fencedstore.PostgresWrites(ctx, conn, "forbid")
	require.NoError(t, err)
	var got []string
	for _, w := range writes {
		assert.Equal(t, "d3", w.Replica)
		got = append(got, fmt.Sprintf("%d %v", w.Token, w.Accepted))
	}
	assert.Equal(t, []string{"50 true", "100 true", "70 false"}, got)
}
