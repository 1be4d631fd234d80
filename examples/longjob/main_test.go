package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestLongJob(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(&out))
	assert.Contains(t, out.String(), "done after 3s, lease still held")
	assert.Contains(t, out.String(), "skipped_held")
	assert.Contains(t, out.String(), "stopped: redlock: lease lost")
	assert.Contains(t, out.String(), "errors.Is(cause, redlock.ErrLeaseLost) = true")
}
