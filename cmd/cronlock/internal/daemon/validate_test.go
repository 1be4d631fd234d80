package daemon

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/cli"
	"github.com/cronlock/cronlock/internal/scheddefault"
)

// validate refuses every config that run refuses at its start, with the same error (each
// problem with its file, line and key) and the same exit code (2: a usageError). The configs
// pass config.Load: each problem is found by the daemon's checks — the lock client's options,
// the span exporter's settings, a job's lock TTL against the lock client, a job's jitter
// against its ticks — which run makes before it adds the jobs to its scheduler and validate
// makes without one.
func TestValidateRefusesWhatRunRefuses(t *testing.T) {
	const nodes = "nodes: ['127.0.0.1:1', '127.0.0.1:2', '127.0.0.1:3']\n"
	for _, tc := range []struct {
		name, config, want string
		env                map[string]string
	}{
		{"a lock_ttl with no validity left", nodes + "jobs:\n  - {name: j, schedule: '@every 10s', command: [x], lock_ttl: 5ms}\n",
			":3: jobs[0].lock_ttl: redlock: TTL 5ms leaves no validity", nil},
		{"a jitter as long as the time between ticks", nodes + "jobs:\n  - name: j\n    schedule: '*/5 * * * *'\n    jitter: 5m\n    command: [x]\n",
			`:3: jobs[0].jitter: 5m0s is not shorter than the 5m0s between ticks of "*/5 * * * *"`, nil},
		{"a jitter longer than the time between the ticks of an H spec", nodes + "jobs:\n  - {name: j, schedule: 'H * * * *', jitter: 2h, command: [x]}\n",
			`:3: jobs[0].jitter: 2h0m0s is not shorter than the 1h0m0s between ticks of "`, nil},
		{"every job's problem", nodes + "jobs:\n  - {name: a, schedule: '@hourly', command: [x], lock_ttl: 5ms}\n  - {name: b, schedule: '@every 10s', jitter: 10s, command: [x]}\n",
			":4: jobs[1].jitter: 10s is not shorter than the 10s between ticks", nil},
		{"one server listed twice with two databases", "nodes:\n  - {addr: '127.0.0.1:1', db: 0}\n  - {addr: '127.0.0.1:1', db: 1}\n  - '127.0.0.1:3'\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			": nodes: redlock: nodes 0 and 1 are the same node (127.0.0.1:1)", nil},
		{"an http:// endpoint given a CA certificate", nodes + "tracing: {otlp_endpoint: 'http://127.0.0.1:4318'}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			": tracing.otlp_endpoint: insecure HTTP endpoint cannot use TLS client configuration",
			map[string]string{"OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": writeCertificate(t)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			path := filepath.Join(t.TempDir(), "c.yaml")
			require.NoError(t, os.WriteFile(path, []byte(tc.config), 0o600))
			cf := cli.ConfigFlags{Path: path}

			var stdout, stderr bytes.Buffer
			verr := Validate(cf, &stdout, &stderr)
			require.Error(t, verr, "validate accepts it: %s", stdout.String())
			assert.Contains(t, verr.Error(), path+tc.want)
			assert.True(t, errors.As(verr, new(usageError)), "validate's error is not a usage error (exit 2): %v", verr)

			// run, from a context that has ended: were the config accepted, it would stop at once.
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			var log bytes.Buffer
			rerr := Run(ctx, Flags{Config: cf, Set: map[string]bool{}, Heartbeat: scheddefault.Heartbeat, RescueEvery: scheddefault.RescueEvery}, &log)
			require.Error(t, rerr, "run accepts it: %s", log.String())
			assert.True(t, errors.As(rerr, new(usageError)) && errors.As(rerr, new(loggedError)), "run's error is not a logged usage error (exit 2): %v", rerr)
			assert.Equal(t, rerr.Error(), verr.Error(), "validate and run refuse it differently")
		})
	}
}

// writeCertificate writes a self-signed certificate, PEM-encoded, and returns its path.
func writeCertificate(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return path
}
