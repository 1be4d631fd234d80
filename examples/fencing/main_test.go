package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestFencing(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	assert.Contains(t, out.String(), `the store kept "written by b"`)
	assert.Contains(t, out.String(), "the stale write was refused: true")
	assert.Contains(t, out.String(), "redlock: lease lost")
}

func TestStore(t *testing.T) {
	var s Store
	require.NoError(t, s.Write(5, "x"))
	require.NoError(t, s.Write(5, "y"), "the same holder may write again")
	assert.ErrorIs(t, s.Write(4, "z"), ErrStaleToken)
	assert.Equal(t, "y", s.value)
}
