package daemon

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// A job's command does not see the variables that hold the nodes' passwords.
func TestJobEnviron(t *testing.T) {
	t.Setenv("CRONLOCK_TEST_PW", "hunter2")
	t.Setenv("CRONLOCK_TEST_OTHER", "kept")
	cfg, err := config.Parse("c.yaml", []byte(`nodes:
  - {addr: "redis-1.internal:6380", username: cl, password_env: CRONLOCK_TEST_PW, tls: true, db: 3}
  - "127.0.0.1:6379"
  - "127.0.0.1:6380"
jobs: [{name: j, schedule: "@hourly", command: ["true"]}]
`))
	require.NoError(t, err)
	env := strings.Join(jobEnviron(cfg), "\n")
	assert.NotContains(t, env, "CRONLOCK_TEST_PW", "a job's command must not see the nodes' passwords")
	assert.Contains(t, env, "CRONLOCK_TEST_OTHER=kept")
}

// A reload that changes the members of a Cluster node is refused, as for a standalone node's
// address.
func TestReloadRefusesOtherClusterMembers(t *testing.T) {
	parse := func(members string) *config.Config {
		c, err := config.Parse("c.yaml", []byte("nodes:\n  - cluster: ["+members+"]\n  - cluster: [b:1]\n  - cluster: [c:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n"))
		require.NoError(t, err)
		return c
	}
	require.NoError(t, sameSettings(parse("a:1, a:2"), parse("a:1, a:2")))
	assert.EqualError(t, sameSettings(parse("a:1, a:2"), parse("a:1, a:3")), "c.yaml: nodes changed: only jobs: and kill_grace: change on SIGHUP; restart the daemon for nodes")
}
