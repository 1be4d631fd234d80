package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBasic(t *testing.T) {
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, "", 2500*time.Millisecond))
	assert.NotContains(t, out.String(), "DUPLICATE")
	assert.Contains(t, out.String(), "heartbeat: ")
	assert.Contains(t, out.String(), "report: ")
}
