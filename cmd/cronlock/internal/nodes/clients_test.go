package nodes

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
)

func TestClients(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_PW", "hunter2")
	t.Setenv("CRONLOCK_TEST_OTHER", "kept")
	cfg, err := config.Parse("c.yaml", []byte(`nodes:
  - {addr: "redis-1.internal:6380", username: cl, password_env: CRONLOCK_TEST_PW, tls: true, db: 3}
  - "127.0.0.1:6379"
  - "127.0.0.1:6380"
jobs: [{name: j, schedule: "@hourly", command: ["true"]}]
`))
	require.NoError(t, err)
	clients, err := Clients(cfg)
	require.NoError(t, err)
	defer Close(clients)
	require.IsType(t, &redis.Client{}, clients[0])
	o := clients[0].(*redis.Client).Options()
	assert.Equal(t, "redis-1.internal:6380", o.Addr)
	assert.Equal(t, "cl", o.Username)
	assert.Equal(t, "hunter2", o.Password)
	assert.Equal(t, 3, o.DB)
	require.NotNil(t, o.TLSConfig)
	assert.Equal(t, "redis-1.internal", o.TLSConfig.ServerName)
	assert.True(t, o.ContextTimeoutEnabled)
	assert.Zero(t, o.MaxRetries, "MaxRetries: -1 (no retries) is stored as 0")
	assert.Nil(t, clients[1].(*redis.Client).Options().TLSConfig)

	// A Cluster node gets a cluster client with the same options; TLS verifies each member's
	// own host.
	cfg, err = config.Parse("c.yaml", []byte(`nodes:
  - {cluster: ["redis-a.internal:6380", "redis-b.internal:6380"], username: cl, password_env: CRONLOCK_TEST_PW, tls: true}
  - cluster: ["127.0.0.1:6379"]
  - cluster: ["127.0.0.1:6380"]
jobs: [{name: j, schedule: "@hourly", command: ["true"]}]
`))
	require.NoError(t, err)
	clusters, err := Clients(cfg)
	require.NoError(t, err)
	defer Close(clusters)
	require.IsType(t, &redis.ClusterClient{}, clusters[0])
	co := clusters[0].(*redis.ClusterClient).Options()
	assert.Equal(t, []string{"redis-a.internal:6380", "redis-b.internal:6380"}, co.Addrs)
	assert.Equal(t, "cl", co.Username)
	assert.Equal(t, "hunter2", co.Password)
	require.NotNil(t, co.TLSConfig)
	assert.Empty(t, co.TLSConfig.ServerName)
	assert.True(t, co.ContextTimeoutEnabled)
	assert.True(t, co.DisableIdentity)
	assert.Equal(t, -1, co.MaxRetries)
}
