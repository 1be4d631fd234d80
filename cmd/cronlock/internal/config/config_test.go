package config_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/job"
)

// docExample is the annotated example file of docs/cli.md (with loopback addresses).
const docExample = `nodes: ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]  # independent Redis nodes
# node entries may instead be maps: {addr, username, password_env, tls, db}
prefix: cronlock            # key prefix (optional)
replica: ""                 # this host's id; default hostname-pid; flag --replica overrides
http: 127.0.0.1:9464        # /healthz /readyz /metrics /jobs ; "" disables
tracing:
  otlp_endpoint: ""         # e.g. http://127.0.0.1:4318 ; "" disables
  service_name: cronlock
jobs:
  - name: backup
    schedule: "0 */5 * * * *"     # robfig/cron syntax, seconds optional
    command: ["/usr/local/bin/backup", "--fast"]
    timeout: 10m
    lock_ttl: 30s
    overlap: forbid               # forbid | allow
    retries: 0
`

func TestParseIssueExample(t *testing.T) {
	c, err := config.Parse("cronlock.yaml", []byte(docExample))
	require.NoError(t, err)
	assert.Equal(t, "cronlock.yaml", c.File)
	require.Len(t, c.Nodes, 3)
	for i, n := range c.Nodes {
		assert.Equal(t, "127.0.0.1:700"+string(rune('1'+i)), n.Addr)
		assert.Equal(t, 1, n.Line)
	}
	assert.Equal(t, 2, c.Quorum())
	assert.Equal(t, "cronlock", c.Prefix)
	assert.Empty(t, c.Replica)
	assert.Equal(t, "127.0.0.1:9464", c.HTTP)
	assert.Equal(t, config.Tracing{ServiceName: "cronlock"}, c.Tracing)
	assert.Equal(t, config.DefaultKillGrace, c.KillGrace)
	assert.Equal(t, config.DefaultBootKey, c.BootKey)
	assert.Equal(t, config.DefaultMaxTTL, c.MaxTTL)
	require.Len(t, c.Jobs, 1)
	assert.Equal(t, config.Job{
		Name: "backup", Schedule: "0 */5 * * * *", Command: []string{"/usr/local/bin/backup", "--fast"},
		Timeout: 10 * time.Minute, LockTTL: 30 * time.Second, Overlap: job.Forbid, OutputLimit: config.DefaultOutputLimit, OutputKeep: config.DefaultOutputKeep, KillGrace: config.DefaultKillGrace, File: "cronlock.yaml", Line: 10,
	}, c.Jobs[0])
	assert.Equal(t, job.Options{Timeout: 10 * time.Minute, LockTTL: 30 * time.Second}, c.Jobs[0].Options())
}

// The message that the package doc and docs/cli.md give as their example, to the letter.
func TestParseDocumentedMessage(t *testing.T) {
	_, err := config.Parse("cronlock.yaml", []byte(`nodes: ["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"]
jobs:
  - name: backup
    schedule: "0 */5 * * * *"
    command: ["/usr/local/bin/backup", "--fast"]
    timeout: 10m
  - name: report
    schedule: "@hourly"
    command: ["/usr/local/bin/report"]
    lock_ttl: 30s
    overlap: forbid
    timeout: 10x
`))
	require.Error(t, err)
	assert.Equal(t, `cronlock.yaml:12: jobs[1].timeout: "10x" is not a duration (e.g. 10m, 90s)`, err.Error())
}

func TestParseGood(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yaml  string
		check func(t *testing.T, c *config.Config)
	}{
		{"minimal", "nodes: [a:1]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n", func(t *testing.T, c *config.Config) {
			assert.Len(t, c.Nodes, 1)
			assert.Empty(t, c.HTTP)
			assert.Equal(t, "cronlock", c.Prefix)
			assert.Equal(t, []string{"true"}, c.Jobs[0].Command)
		}},
		{"jitter and H", "nodes: [a:1]\njobs: [{name: j, schedule: 'H H(0-5) * * *', jitter: 10m, command: [true]}]\n", func(t *testing.T, c *config.Config) {
			assert.Equal(t, "H H(0-5) * * *", c.Jobs[0].Schedule, "the schedule as written: the scheduler resolves H")
			assert.Equal(t, 10*time.Minute, c.Jobs[0].Jitter)
			assert.Equal(t, 10*time.Minute, c.Jobs[0].Options().Jitter)
		}},
		{"node maps", `nodes:
  - addr: redis-1.internal:6380
    username: cronlock
    password_env: REDIS_PASSWORD
    tls: true
    db: 2
  - redis-2.internal:6380
  - {addr: "[::1]:6380"}
jobs: [{name: j, schedule: '@every 1s', command: [true]}]
`, func(t *testing.T, c *config.Config) {
			require.Len(t, c.Nodes, 3)
			n := c.Nodes[0]
			assert.Equal(t, "redis-1.internal:6380", n.Addr)
			assert.Equal(t, "cronlock", n.Username)
			assert.Equal(t, "REDIS_PASSWORD", n.PasswordEnv)
			assert.True(t, n.TLS)
			assert.Equal(t, 2, n.DB)
			assert.Equal(t, 2, n.Line)
			assert.Equal(t, "[::1]:6380", c.Nodes[2].Addr)
			assert.Equal(t, 8, c.Nodes[2].Line)
		}},
		{"cluster nodes", `nodes:
  - cluster: ["10.0.1.1:6379", "10.0.1.2:6379"]
    password_env: CLUSTER_A_PASSWORD
    tls: true
  - {cluster: ["10.0.2.1:6379"], db: 0}
  - cluster: ["10.0.3.1:6379"]
jobs: [{name: j, schedule: '@every 1s', command: [true]}]
`, func(t *testing.T, c *config.Config) {
			require.Len(t, c.Nodes, 3)
			n := c.Nodes[0]
			assert.Empty(t, n.Addr)
			assert.Equal(t, []string{"10.0.1.1:6379", "10.0.1.2:6379"}, n.Cluster)
			assert.Equal(t, "cluster(10.0.1.1:6379, 10.0.1.2:6379)", n.Name())
			assert.Equal(t, "CLUSTER_A_PASSWORD", n.PasswordEnv)
			assert.True(t, n.TLS)
			assert.Equal(t, []string{"10.0.2.1:6379"}, c.Nodes[1].Cluster)
			assert.Equal(t, 2, c.Quorum())
		}},
		{"wait_for_replicas per node", "wait_for_replicas: 2\nnodes: [a:1, {addr: 'b:1', wait_for_replicas: 0}, {addr: 'c:1', wait_for_replicas: 1}]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n", func(t *testing.T, c *config.Config) {
			assert.Equal(t, 2, c.WaitForReplicas)
			assert.Equal(t, []int{2, 0, 1}, []int{c.Nodes[0].WaitForReplicas, c.Nodes[1].WaitForReplicas, c.Nodes[2].WaitForReplicas}, "a node's own count, else the top level's")
		}},
		{"same address, other db", "nodes: [a:1, {addr: 'a:1', db: 1}, b:1]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n", nil},
		{"even nodes allowed", "allow_even_nodes: true\nnodes: [a:1, b:1]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n", func(t *testing.T, c *config.Config) {
			assert.True(t, c.AllowEvenNodes)
			assert.Equal(t, 2, c.Quorum())
		}},
		{"every key", `nodes: [a:1, b:1, c:1]
prefix: prod
replica: host-1
http: ":9464"
http_token_env: CRONLOCK_TOKEN
tracing: {otlp_endpoint: "http://127.0.0.1:4318", service_name: cron, ui_url: "http://127.0.0.1:16686/trace/{trace_id}"}
kill_grace: 3s
boot_key: "prod:boot"
max_ttl: 2m
wait_for_replicas: 1
jobs:
  - name: a
    schedule: "*/5 * * * *"
    command: [sh, -c, "echo $CRONLOCK_TICK"]
    timeout: 1h
    lock_ttl: 90s
    renew_every: 20s
    overlap: allow
    retries: 3
    catch_up: 10m
    output_level: debug
    output_limit: 1MiB
    output_keep: 16KiB
`, func(t *testing.T, c *config.Config) {
			assert.Equal(t, "prod", c.Prefix)
			assert.Equal(t, "host-1", c.Replica)
			assert.Equal(t, "127.0.0.1:9464", c.HTTP, "no host: localhost")
			assert.Equal(t, "CRONLOCK_TOKEN", c.HTTPTokenEnv)
			assert.Equal(t, "http://127.0.0.1:16686/trace/{trace_id}", c.Tracing.UIURL)
			assert.Equal(t, config.Tracing{OTLPEndpoint: "http://127.0.0.1:4318", ServiceName: "cron", UIURL: "http://127.0.0.1:16686/trace/{trace_id}"}, c.Tracing)
			assert.Equal(t, 3*time.Second, c.KillGrace)
			assert.Equal(t, "prod:boot", c.BootKey)
			assert.Equal(t, 2*time.Minute, c.MaxTTL)
			assert.Equal(t, 1, c.WaitForReplicas)
			assert.Equal(t, config.Job{Name: "a", Schedule: "*/5 * * * *", Command: []string{"sh", "-c", "echo $CRONLOCK_TICK"},
				Timeout: time.Hour, LockTTL: 90 * time.Second, RenewEvery: 20 * time.Second, Overlap: job.Allow,
				Retries: 3, CatchUp: 10 * time.Minute, OutputLevel: slog.LevelDebug, OutputLimit: 1 << 20, OutputKeep: 16 << 10, KillGrace: 3 * time.Second, File: "c.yaml", Line: 12}, c.Jobs[0])
		}},
		{"null values mean the default", "nodes: [a:1]\nprefix:\nreplica: ~\njobs: [{name: j, schedule: '@every 1s', command: [true], timeout: null}]\n", func(t *testing.T, c *config.Config) {
			assert.Equal(t, "cronlock", c.Prefix)
			assert.Zero(t, c.Jobs[0].Timeout)
		}},
		{"anchors, aliases and merge keys", `x-defaults: &defaults
  timeout: 5m
  lock_ttl: 20s
  command: [/bin/true]
nodes: &nodes [a:1, b:1, c:1]
jobs:
  - <<: *defaults
    name: one
    schedule: "@hourly"
  - <<: *defaults
    name: two
    schedule: "@daily"
    timeout: 1m
`, func(t *testing.T, c *config.Config) {
			require.Len(t, c.Jobs, 2)
			assert.Equal(t, 5*time.Minute, c.Jobs[0].Timeout)
			assert.Equal(t, time.Minute, c.Jobs[1].Timeout, "an explicit key wins over a merged one")
			assert.Equal(t, 20*time.Second, c.Jobs[1].LockTTL)
			assert.Equal(t, []string{"/bin/true"}, c.Jobs[1].Command)
		}},
		{"cron specs", `nodes: [a:1]
jobs:
  - {name: five-fields, schedule: "30 9 * * 1-5", command: [x]}
  - {name: tz, schedule: "CRON_TZ=Europe/Paris 0 9 * * *", command: [x]}
  - {name: descriptor, schedule: "@weekly", command: [x]}
`, nil},
		{"zero kill grace", "kill_grace: 0s\nnodes: [a:1]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n", func(t *testing.T, c *config.Config) {
			assert.Zero(t, c.KillGrace)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := config.Parse("c.yaml", []byte(tc.yaml))
			require.NoError(t, err)
			if tc.check != nil {
				tc.check(t, c)
			}
		})
	}
}

// Without kill_grace:, a job's grace is the default, lowered to half of what a renewed lease has
// left; kill_grace: is taken as given when it fits.
func TestKillGrace(t *testing.T) {
	c, err := config.Parse("c.yaml", []byte(good+"    lock_ttl: 6s\n  - {name: long, schedule: '@hourly', command: [x], lock_ttl: 50s, renew_every: 5s}\n"))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Second, c.Jobs[0].KillGrace, "(6s − 2s) / 2")
	assert.Equal(t, config.DefaultKillGrace, c.Jobs[1].KillGrace)
	c, err = config.Parse("c.yaml", []byte("kill_grace: 3s\n"+good+"    lock_ttl: 6s\n"))
	require.NoError(t, err)
	assert.Equal(t, 3*time.Second, c.Jobs[0].KillGrace)
	_, err = c.Jobs[0].KillGraceFor(4*time.Second, true)
	assert.ErrorContains(t, err, "4s is not shorter than lock_ttl 6s − renew_every 2s = 4s")
}

// min_interval lowers the floor of schedules; every second is at the default floor.
func TestMinInterval(t *testing.T) {
	c, err := config.Parse("c.yaml", []byte("min_interval: 100ms\nnodes: [a:1]\njobs: [{name: j, schedule: '@every 100ms', command: [x]}]\n"))
	require.NoError(t, err)
	assert.Equal(t, 100*time.Millisecond, c.MinInterval)
	_, err = config.Parse("c.yaml", []byte("nodes: [a:1]\njobs: [{name: j, schedule: '* * * * * *', command: [x]}]\n"))
	require.NoError(t, err)
}

// A job's env: values as given, NAME_env: from the daemon's environment, an error naming the
// key when the variable is not set.
func TestJobEnviron(t *testing.T) {
	c, err := config.Parse("c.yaml", []byte(good+"    working_dir: /srv\n    env:\n      MODE: fast\n      N: 3\n      PW_env: TEST_PW\n"))
	require.NoError(t, err)
	assert.Equal(t, "/srv", c.Jobs[0].WorkingDir)
	env, err := c.Jobs[0].Environ(func(name string) (string, bool) { return "secret", name == "TEST_PW" })
	require.NoError(t, err)
	assert.Equal(t, []string{"MODE=fast", "N=3", "PW=secret"}, env)
	_, err = c.Jobs[0].Environ(func(string) (string, bool) { return "", false })
	assert.EqualError(t, err, "c.yaml:10: jobs[0].env.PW_env: environment variable TEST_PW is not set: export it in the daemon's environment, with the value of PW")
}

// good is a valid file, with each job line numbered for the bad cases built from it.
const good = `nodes: ["a:1", "b:1", "c:1"]
jobs:
  - name: backup
    schedule: "0 */5 * * * *"
    command: [/bin/backup]
`

func TestParseBad(t *testing.T) {
	for _, tc := range []struct {
		name string
		yaml string
		want string // the whole first line of the error
	}{
		{"kill grace longer than a renewed lease has left", "kill_grace: 10s\n" + good + "    lock_ttl: 6s\n",
			`c.yaml:1: kill_grace: 10s is not shorter than lock_ttl 6s − renew_every 2s = 4s of job "backup", the least validity its lease has left after a renewal: SIGTERM comes kill_grace before the lease's deadline, so it would come before every renewal; lower kill_grace, or raise the job's lock_ttl`},
		{"schedule faster than min_interval", "nodes: [a:1]\njobs: [{name: j, schedule: '@every 500ms', command: [x]}]\n",
			`c.yaml:2: jobs[0].schedule: "@every 500ms" fires 500ms apart, more often than min_interval 1s: each tick starts a process on some host; give a slower schedule, or lower min_interval (e.g. min_interval: 500ms)`},
		{"min_interval not positive", "min_interval: 0s\n" + good, `c.yaml:1: min_interval: 0s: must be positive, e.g. 1s (the shortest time between two ticks of a job)`},
		{"bad output level", good + "    output_level: loud\n", `c.yaml:6: jobs[0].output_level: "loud" is not a log level: use debug, info (the default), warn or error`},
		{"bad output limit", good + "    output_limit: 64KB\n", `c.yaml:6: jobs[0].output_limit: "64KB" is not a size: give a count of bytes, e.g. 65536, 64KiB or 1MiB`},
		{"negative output limit", good + "    output_limit: -1\n", `c.yaml:6: jobs[0].output_limit: -1 is negative: give a count of bytes, e.g. 64KiB (0: none)`},
		{"output keep too big", good + "    output_keep: 1MiB\n", `c.yaml:6: jobs[0].output_keep: 1048576 bytes is more than a history record keeps: give at most 65536 (64KiB)`},
		{"negative output keep", good + "    output_keep: -1\n", `c.yaml:6: jobs[0].output_keep: -1 is negative: give a count of bytes, e.g. 64KiB (0: none)`},
		{"env not a mapping", good + "    env: [A=1]\n", `c.yaml:6: jobs[0].env: must be a mapping of variable names to values, e.g. {REPORT_DIR: /var/reports, DB_PASSWORD_env: BACKUP_DB_PASSWORD}; not a list`},
		{"env sets a CRONLOCK_ variable", good + "    env: {CRONLOCK_JOB: x}\n", `c.yaml:6: jobs[0].env.CRONLOCK_JOB: CRONLOCK_JOB is set by cronlock for each run: give another name`},
		{"env reference empty", good + "    env: {PW_env: ''}\n", `c.yaml:6: jobs[0].env.PW_env: is empty: give the name of the daemon's variable to take PW from`},
		{"env hands a job a node's password", "nodes: [{addr: 'a:1', password_env: REDIS_PW}]\njobs:\n  - {name: j, schedule: '@hourly', command: [x], env: {PW_env: REDIS_PW}}\n",
			`c.yaml:3: jobs[0].env.PW_env: REDIS_PW holds the password of nodes[0] (password_env), which no job is given: give the job a credential of its own in another variable`},
		{"env hands a job the HTTP token", "http_token_env: TOK\n" + good + "    env: {T_env: TOK}\n",
			`c.yaml:7: jobs[0].env.T_env: TOK holds the HTTP server's bearer token (http_token_env), which no job is given: give the job a credential of its own in another variable`},
		{"job named ..", "nodes: [a:1]\njobs: [{name: '..', schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: jobs[0].name: ".." cannot be a segment of the URLs of the job's buttons and history (browsers drop it): give the job a name with letters, e.g. "backup"`},
		{"env given twice", good + "    env: {PW: a, PW_env: B}\n", `c.yaml:6: jobs[0].env.PW_env: PW is given twice (first on line 6): keep one`},
		{"working_dir empty", good + "    working_dir: ''\n", `c.yaml:6: jobs[0].working_dir: is empty: give the directory the command runs in, e.g. /var/lib/backup, or leave it out for the daemon's`},
		{"bad duration", good + "    timeout: 10x\n", `c.yaml:6: jobs[0].timeout: "10x" is not a duration (e.g. 10m, 90s)`},
		{"bad jitter", good + "    jitter: 10x\n", `c.yaml:6: jobs[0].jitter: "10x" is not a duration (e.g. 10m, 90s)`},
		{"negative jitter", good + "    jitter: -1s\n",
			`c.yaml:6: jobs[0].jitter: -1s is negative: give the span over which to spread the starts of the ticks, or 0 to start each tick at its instant`},
		{"bad H", "nodes: [a:1]\njobs:\n  - name: j\n    command: [x]\n    schedule: 'H(0-99) * * * *'\n",
			`c.yaml:5: jobs[0].schedule: spec "H(0-99) * * * *": field 1 (minute) "H(0-99)": the range must go up and stay within 0-59, as in H(0-9); e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`},
		{"duration without unit", good + "    lock_ttl: 30\n", `c.yaml:6: jobs[0].lock_ttl: 30 is not a duration: give a unit, e.g. 30s or 30m`},
		{"duration as a list", good + "    timeout: [1s]\n", `c.yaml:6: jobs[0].timeout: must be a duration (e.g. 10m, 90s), not a list`},
		{"unknown top-level key", "nodes: [a:1]\nnode: [b:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: node: unknown key: did you mean "nodes"? (known: nodes, allow_even_nodes, prefix, replica, http, http_token_env, tracing, kill_grace, boot_key, max_ttl, wait_for_replicas, min_interval, jobs, crontab)`},
		{"unknown job key", good + "    timout: 1m\n",
			`c.yaml:6: jobs[0].timout: unknown key: did you mean "timeout"? (known: name, schedule, command, timeout, lock_ttl, renew_every, overlap, retries, catch_up, jitter, output_level, output_limit, output_keep, env, working_dir)`},
		{"unknown key far from any", good + "    owner: ops\n",
			`c.yaml:6: jobs[0].owner: unknown key (known: name, schedule, command, timeout, lock_ttl, renew_every, overlap, retries, catch_up, jitter, output_level, output_limit, output_keep, env, working_dir)`},
		{"unknown node key", "nodes: [{addr: 'a:1', password: hunter2}]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: nodes[0].password: unknown key (known: addr, cluster, username, password_env, tls, db, wait_for_replicas)`},
		{"unknown tracing key", good + "tracing:\n  endpoint: x\n",
			`c.yaml:7: tracing.endpoint: unknown key (known: otlp_endpoint, service_name, ui_url)`},
		{"key given twice", good + "    schedule: '@daily'\n", `c.yaml:6: jobs[0].schedule: given twice (first on line 4): keep one`},
		{"bad spec", "nodes: [a:1]\njobs:\n  - name: j\n    schedule: '61 * * * *'\n    command: [x]\n",
			`c.yaml:4: jobs[0].schedule: spec "61 * * * *": field 1 (minute) "61": end of range (61) above maximum (59); e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`},
		{"spec that never fires", "nodes: [a:1]\njobs:\n  - {name: j, schedule: '0 0 30 2 *', command: [x]}\n",
			`c.yaml:3: jobs[0].schedule: "0 0 30 2 *" never fires: no matching time in the next five years (a date such as 30 February?)`},
		{"unquoted star", "nodes: [a:1]\njobs:\n  - name: j\n    schedule: */5 * * * *\n    command: [x]\n",
			`c.yaml:4: not valid YAML: did not find expected alphabetic or numeric character (line 4: a value that starts with "*" must be quoted, e.g. schedule: "*/5 * * * *")`},
		{"unquoted at", "nodes: [a:1]\njobs:\n  - name: j\n    schedule: @every 5s\n    command: [x]\n",
			`c.yaml:4: not valid YAML: found character that cannot start any token (line 4: a value that starts with "@" must be quoted, e.g. schedule: "@every 10s")`},
		{"duplicate names", good + "  - name: backup\n    schedule: '@daily'\n    command: [x]\n",
			`c.yaml:6: jobs[1].name: "backup" is already the name of jobs[0] (line 3): give each job its own name`},
		{"even nodes", "nodes: [a:1, b:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: nodes: 2 nodes is an even count, which tolerates no more failed nodes than 1: use an odd count (3 or 5), or set allow_even_nodes: true`},
		{"no nodes", "nodes: []\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: nodes: is empty: give the addresses of 3 (or 5) independent Redis nodes`},
		{"missing nodes", "jobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml: nodes: missing: give the addresses of independent Redis nodes, e.g. nodes: ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]`},
		{"nodes as a string", "nodes: a:1\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: nodes: must be a list of host:port, e.g. ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"], not the string "a:1"`},
		{"node without port", "nodes: [a:1, b, c:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: nodes[1]: "b": not host:port: give host:port, e.g. "10.0.0.1:6379"`},
		{"node with a bad port", "nodes:\n  - a:1\n  - {addr: 'b:99999'}\n  - c:1\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:3: nodes[1]: "b:99999": port "99999" is not a port number: give host:port, e.g. "10.0.0.1:6379"`},
		{"node twice", "nodes: [a:1, b:1, a:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: nodes[2]: "a:1" is listed twice (also nodes[0]): the nodes must be independent Redis servers or Clusters`},
		{"cluster empty", "nodes:\n  - cluster: []\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].cluster: is empty: give the host:port of one or more members of the Redis Cluster, e.g. cluster: ["10.0.1.1:6379", "10.0.1.2:6379", "10.0.1.3:6379"]`},
		{"cluster as a string", "nodes:\n  - cluster: a:1\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].cluster: must be a list of the host:port of the Cluster's members, e.g. cluster: ["10.0.1.1:6379", "10.0.1.2:6379", "10.0.1.3:6379"], not the string "a:1"`},
		{"cluster member without port", "nodes:\n  - cluster: [a:1, b]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].cluster[1]: "b": not host:port: give host:port of a member, e.g. "10.0.1.1:6379"`},
		{"cluster member twice", "nodes:\n  - cluster: [a:1, a:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].cluster[1]: "a:1" is listed twice (also nodes[0].cluster[0]): list each member once`},
		{"cluster member in two nodes", "nodes:\n  - cluster: [a:1, b:1]\n  - cluster: [c:1]\n  - cluster: [d:1, b:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:4: nodes[2]: "b:1" is listed twice (also nodes[0]): the nodes must be independent Redis servers or Clusters`},
		{"addr and cluster", "nodes:\n  - {addr: 'a:1', cluster: [b:1]}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0]: has both addr and cluster: give addr: for a standalone Redis server, or cluster: for the members of a Redis Cluster`},
		{"cluster with a db", "nodes:\n  - {cluster: [a:1], db: 2}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].db: 2: a Redis Cluster has database 0 only: drop db:`},
		{"standalone and cluster nodes mixed", "nodes:\n  - cluster: [a:1]\n  - b:1\n  - cluster: [c:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:3: nodes[1]: is a standalone server, but nodes[0] is a Redis Cluster: the nodes must be all standalone servers or all Redis Clusters (with Clusters the boot markers are per hash slot on every node): make every node a cluster: list of members, or none`},
		{"boot key with a hash tag on clusters", "boot_key: '{x}:boot'\nnodes:\n  - cluster: [a:1]\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:1: boot_key: "{x}:boot": where the nodes are Redis Clusters, it is the prefix of one marker per hash slot and must not contain "{": drop the hash tag`},
		{"node without addr", "nodes:\n  - {username: u}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].addr: missing: give the node's host:port (or cluster: with the members of a Redis Cluster)`},
		{"password in password_env", "nodes:\n  - addr: a:1\n    password_env: \"s3cr3t!\"\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:3: nodes[0].password_env: "s3cr3t!" is not the name of an environment variable (letters, digits and _): give the variable that holds the password, not the password`},
		{"tls not a bool", "nodes:\n  - {addr: 'a:1', tls: 'yes'}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].tls: must be true or false (unquoted), not the string "yes"`},
		{"negative db", "nodes:\n  - {addr: 'a:1', db: -1}\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: nodes[0].db: -1 is negative: give a database number, e.g. 0`},
		{"allow_even_nodes not a bool", "allow_even_nodes: 1\n" + good,
			`c.yaml:1: allow_even_nodes: must be true or false (unquoted), not the number 1`},
		{"prefix with braces", "prefix: '{x}'\n" + good,
			`c.yaml:1: prefix: "{x}": give a non-empty prefix without braces or spaces, e.g. "cronlock"`},
		{"bad http", "http: localhost\n" + good,
			`c.yaml:1: http: "localhost": not host:port, e.g. 127.0.0.1:9464 (or "" for no HTTP server)`},
		{"bad otlp endpoint", "tracing: {otlp_endpoint: '127.0.0.1:4318'}\n" + good,
			`c.yaml:1: tracing.otlp_endpoint: "127.0.0.1:4318" is not an http:// or https:// URL, e.g. http://127.0.0.1:4318 (or "" for no tracing)`},
		{"ui_url without {trace_id}", "tracing: {ui_url: 'http://jaeger/trace/'}\n" + good,
			`c.yaml:1: tracing.ui_url: "http://jaeger/trace/": give an http(s) URL with {trace_id} in it, e.g. http://127.0.0.1:16686/trace/{trace_id} (Jaeger)`},
		{"bad http_token_env", "http_token_env: 'A B'\n" + good,
			`c.yaml:1: http_token_env: "A B": give the name of the environment variable that holds the bearer token, e.g. CRONLOCK_HTTP_TOKEN`},
		{"tracing not a mapping", "tracing: on\n" + good,
			`c.yaml:1: tracing: must be a mapping (otlp_endpoint:, service_name:), not the string "on"`},
		{"negative kill grace", "kill_grace: -1s\n" + good,
			`c.yaml:1: kill_grace: -1s is negative: give how long a job's processes have between SIGTERM and SIGKILL, e.g. 10s (0: SIGKILL at once)`},
		{"negative wait_for_replicas", "wait_for_replicas: -1\n" + good,
			`c.yaml:1: wait_for_replicas: -1 is negative: give how many replicas of each node must acknowledge a lock, e.g. 1 (0: do not wait)`},
		{"negative wait_for_replicas of a node", "nodes: [a:1, {addr: 'b:1', wait_for_replicas: -1}, c:1]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n",
			`c.yaml:1: nodes[1].wait_for_replicas: -1 is negative: give how many replicas of each node must acknowledge a lock, e.g. 1 (0: do not wait)`},
		{"zero max ttl", "max_ttl: 0s\n" + good,
			`c.yaml:1: max_ttl: 0s: must be positive, e.g. 1m (the longest lock TTL, and how long a node that lost its memory refuses locks)`},
		{"lock ttl above max ttl", good + "    lock_ttl: 2m\n",
			`c.yaml:6: jobs[0].lock_ttl: 2m0s is longer than max_ttl 1m0s (the longest lock TTL, which is also a restarted node's quarantine): lower lock_ttl, or raise max_ttl`},
		{"default lock ttl above max ttl", "max_ttl: 10s\n" + good,
			`c.yaml:4: jobs[0].lock_ttl: the default 30s is longer than max_ttl 10s: give lock_ttl of at most 10s, or raise max_ttl`},
		{"missing jobs", "nodes: [a:1]\n", `c.yaml: jobs: missing: give at least one job with name:, schedule: and command:, or a crontab: file`},
		{"no jobs", "nodes: [a:1]\njobs: []\n", `c.yaml:2: jobs: is empty: give at least one job with name:, schedule: and command:`},
		{"job not a mapping", "nodes: [a:1]\njobs:\n  - backup\n", `c.yaml:3: jobs[0]: must be a mapping (name:, schedule:, command:, …), not the string "backup"`},
		{"missing command", "nodes: [a:1]\njobs:\n  - name: j\n    schedule: '@hourly'\n",
			`c.yaml:3: jobs[0].command: missing: give the program and its arguments as a list, e.g. ["/usr/local/bin/backup", "--fast"]`},
		{"command as a string", "nodes: [a:1]\njobs:\n  - name: j\n    schedule: '@hourly'\n    command: backup --fast\n",
			`c.yaml:5: jobs[0].command: must be a list: the program and its arguments, run without a shell, e.g. ["/usr/local/bin/backup", "--fast"] or ["sh", "-c", "backup --fast | gzip"]; not the string "backup --fast"`},
		{"empty program", "nodes: [a:1]\njobs:\n  - name: j\n    schedule: '@hourly'\n    command: ['', x]\n",
			`c.yaml:5: jobs[0].command[0]: is empty: give the program to run, e.g. /usr/local/bin/backup`},
		{"missing name", "nodes: [a:1]\njobs:\n  - schedule: '@hourly'\n    command: [x]\n",
			`c.yaml:3: jobs[0].name: missing: give the job a name that is the same on every host, e.g. "backup"`},
		{"name with a space (job.Validate)", "nodes: [a:1]\njobs:\n  - name: my job\n    schedule: '@hourly'\n    command: [x]\n",
			`c.yaml:3: jobs[0].name: contains ' ': use letters, digits and punctuation, without spaces`},
		{"name with braces (job.Validate)", "nodes: [a:1]\njobs:\n  - {name: '{x}', schedule: '@hourly', command: [x]}\n",
			`c.yaml:3: jobs[0].name: contains '{': braces would break the hash tag of the job's lock keys; use other punctuation, e.g. "-" or ":"`},
		{"renew_every too long (job.Validate)", good + "    lock_ttl: 30s\n    renew_every: 20s\n",
			`c.yaml:7: jobs[0].renew_every: 20s is more than half of lock_ttl 30s: one slow or failed renewal would lose the lock; use lock_ttl/3 (10s), or leave it 0`},
		{"renew_every not shorter than the default lock_ttl (job.Validate)", good + "    renew_every: 30s\n",
			`c.yaml:6: jobs[0].renew_every: 30s is not shorter than lock_ttl 30s: the lock would expire before it is renewed; use lock_ttl/3 (10s), or leave it 0`},
		{"negative renew_every (job.Validate)", good + "    renew_every: -1s\n",
			`c.yaml:6: jobs[0].renew_every: -1s is negative: give a positive interval, or 0 for lock_ttl/3 (10s)`},
		{"negative timeout (job.Validate)", good + "    timeout: -1m\n",
			`c.yaml:6: jobs[0].timeout: -1m0s is negative: give a positive bound, or 0 for none`},
		{"negative retries (job.Validate)", good + "    retries: -1\n",
			`c.yaml:6: jobs[0].retries: -1 is negative: give the number of retries after a failed run, or 0 for none`},
		{"retries not a number", good + "    retries: three\n", `c.yaml:6: jobs[0].retries: must be a whole number, not the string "three"`},
		{"bad overlap", good + "    overlap: sometimes\n",
			`c.yaml:6: jobs[0].overlap: "sometimes" is not an overlap policy: use forbid (the default: no two runs of the job at once, cluster-wide; a tick that comes while one runs is skipped), replace (a tick stops the run under way, then starts) or allow`},
		{"empty file", "", `c.yaml: is empty: give at least nodes: and jobs: (see docs/cli.md)`},
		{"only comments", "# nothing\n", `c.yaml: is empty: give at least nodes: and jobs: (see docs/cli.md)`},
		{"top level list", "- a\n", `c.yaml:1: the top level must be a mapping of keys (nodes:, jobs:, …), not a list`},
		{"two documents", good + "---\nnodes: []\n", `c.yaml:6: a second YAML document starts here: put the whole config in one document (remove the --- line)`},
		{"syntax error", "nodes: [a:1\njobs: []\n", `c.yaml:1: not valid YAML: did not find expected ',' or ']'`},
		{"tab indentation", "nodes: [a:1]\njobs:\n\t- name: x\n", `c.yaml:3: not valid YAML: found character that cannot start any token`},
		{"merge of a string", "nodes: [a:1]\njobs:\n  - <<: nope\n    name: j\n    schedule: '@hourly'\n    command: [x]\n",
			`c.yaml:3: jobs[0]: a merge key (<<) takes a mapping or a list of mappings, not the string "nope"`},
		{"non-string key", "nodes: [a:1]\n[x]: 1\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n",
			`c.yaml:2: a key must be a plain name, not a list`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := config.Parse("c.yaml", []byte(tc.yaml))
			require.Error(t, err)
			first, _, _ := strings.Cut(err.Error(), "\n")
			assert.Equal(t, tc.want, first, "whole error:\n%v", err)
			var ce *config.Error
			require.ErrorAs(t, err, &ce)
		})
	}
}

// Every problem is reported, each on its own line, not only the first.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := config.Parse("c.yaml", []byte(`nodes: [a:1, b:1]
jobs:
  - name: a
    schedule: "@every 1x"
    command: [x]
  - name: b
    schedule: "@hourly"
    command: [x]
    timeout: 5
    overlap: maybe
`))
	require.Error(t, err)
	assert.Equal(t, []string{
		`c.yaml:1: nodes: 2 nodes is an even count, which tolerates no more failed nodes than 1: use an odd count (3 or 5), or set allow_even_nodes: true`,
		`c.yaml:4: jobs[0].schedule: spec "@every 1x": @every: "1x" is not a duration (time: unknown unit "x" in duration "1x"): write it like 10s, 1m30s, 250ms; e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`,
		`c.yaml:9: jobs[1].timeout: 5 is not a duration: give a unit, e.g. 5s or 5m`,
		`c.yaml:10: jobs[1].overlap: "maybe" is not an overlap policy: use forbid (the default: no two runs of the job at once, cluster-wide; a tick that comes while one runs is skipped), replace (a tick stops the run under way, then starts) or allow`,
	}, strings.Split(err.Error(), "\n"))
}

func TestParseLimitsErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("nodes: [a:1]\njobs:\n")
	for range 30 {
		b.WriteString("  - {name: j, schedule: '@hourly', command: [x], timeout: x}\n")
	}
	_, err := config.Parse("c.yaml", []byte(b.String()))
	lines := strings.Split(err.Error(), "\n")
	assert.Len(t, lines, 21)
	assert.Equal(t, "c.yaml: and 10 more problems", lines[20])
}

// A file of nested aliases that would expand exponentially (2^30 merges) is refused.
func TestParseAliasBomb(t *testing.T) {
	y := "x-a: &a {timeout: 1s}\n"
	prev := "a"
	for i := range 30 {
		name := "m" + string(rune('a'+i%26)) + strings.Repeat("x", i/26)
		y += "x-" + name + ": &" + name + " {<<: [*" + prev + ", *" + prev + "]}\n"
		prev = name
	}
	y += "nodes: [a:1]\njobs:\n  - {<<: *" + prev + ", name: j, schedule: '@hourly', command: [x]}\n"
	_, err := config.Parse("c.yaml", []byte(y))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "aliases expand to more than 10000 nodes")
}

func TestPassword(t *testing.T) {
	c, err := config.Parse("c.yaml", []byte("nodes:\n  - {addr: 'a:1', password_env: CRONLOCK_TEST_PW}\n  - b:1\n  - c:1\njobs: [{name: j, schedule: '@hourly', command: [x]}]\n"))
	require.NoError(t, err)
	env := map[string]string{}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }

	_, err = c.Nodes[0].Password(lookup)
	require.Error(t, err)
	assert.Equal(t, "c.yaml:2: nodes[0].password_env: environment variable CRONLOCK_TEST_PW is not set: export it with the password of a:1", err.Error())

	env["CRONLOCK_TEST_PW"] = "hunter2"
	pw, err := c.Nodes[0].Password(lookup)
	require.NoError(t, err)
	assert.Equal(t, "hunter2", pw)

	pw, err = c.Nodes[1].Password(lookup)
	require.NoError(t, err)
	assert.Empty(t, pw, "a node without password_env has no password")
}

func TestLoad(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cronlock.yaml")
	require.NoError(t, os.WriteFile(path, []byte(docExample), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	assert.Equal(t, path, c.File)

	_, err = config.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	assert.True(t, errors.Is(err, os.ErrNotExist), "%v", err)
}

// A file that others than root and the daemon's user can change is refused, unless Insecure.
func TestLoadUntrusted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cronlock.yaml")
	require.NoError(t, os.WriteFile(path, []byte(docExample), 0o600))
	for _, mode := range []os.FileMode{0o620, 0o602, 0o666} {
		require.NoError(t, os.Chmod(path, mode))
		_, err := config.Load(path)
		require.ErrorIs(t, err, config.ErrUntrusted, "mode %04o", mode)
		assert.Equal(t, fmt.Sprintf("%s: config: not safe to trust: group or others can write it (mode %04o), and whoever writes the config runs commands as this daemon: chmod go-w %s", path, mode, path), err.Error())
		_, err = config.Load(path, config.Insecure())
		require.NoError(t, err, "Insecure accepts mode %04o", mode)
	}
	require.NoError(t, os.Chmod(path, 0o644))
	_, err := config.Load(path)
	require.NoError(t, err, "others may read it")

	if os.Geteuid() != 0 {
		t.Skip("giving the file to another user needs root")
	}
	require.NoError(t, os.Chown(path, 65534, 65534))
	_, err = config.Load(path)
	require.ErrorIs(t, err, config.ErrUntrusted)
	assert.Contains(t, err.Error(), "owned by uid 65534, neither root nor this daemon's user (uid 0)")
	_, err = config.Load(path, config.Insecure())
	require.NoError(t, err)
}
