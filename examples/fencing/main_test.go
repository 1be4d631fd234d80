package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFencing(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out, ""))
	assert.Contains(t, out.String(), `the store kept "written by b"`)
	assert.Contains(t, out.String(), "the stale write was refused: true")
	assert.Contains(t, out.String(), "redlock: lease lost")
}

// The same story with the store on a real PostgreSQL, checked by pgfence.
func TestFencingOnPostgres(t *testing.T) {
	dsn := pgtest.Start(t).DSN
	var out bytes.Buffer
	require.NoError(t, run(&out, dsn))
	assert.Contains(t, out.String(), `the store kept "written by b"`)
	assert.Contains(t, out.String(), "the stale write was refused: true")
	assert.Contains(t, out.String(), "fence: stale token for resource \"ledger-sync\"")
}

func TestStore(t *testing.T) {
	var s Store
	ctx := context.Background()
	require.NoError(t, s.Write(ctx, 5, "x"))
	require.NoError(t, s.Write(ctx, 5, "y"), "the same holder may write again")
	assert.ErrorIs(t, s.Write(ctx, 4, "z"), fence.ErrStale)
	assert.Equal(t, "y", s.value)
}
