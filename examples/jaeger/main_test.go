package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example exports its spans over OTLP/HTTP: here to a stand-in that only counts them (the
// Jaeger end-to-end test, internal/e2e, checks what a real Jaeger makes of them).
func TestExportsOverOTLP(t *testing.T) {
	var posts, bytesIn atomic.Int64
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/traces" && r.Method == http.MethodPost {
			n, _ := io.Copy(io.Discard, r.Body)
			posts.Add(1)
			bytesIn.Add(n)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()
	var out bytes.Buffer
	require.NoError(t, run(context.Background(), &out, "", strings.TrimPrefix(sink.URL, "http://"), 2500*time.Millisecond))
	assert.Contains(t, out.String(), "sent the report of")
	assert.Positive(t, posts.Load(), "spans exported at shutdown at the latest")
	assert.Positive(t, bytesIn.Load())
}
