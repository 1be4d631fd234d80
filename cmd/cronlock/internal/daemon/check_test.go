package daemon

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// checkJob refuses the jobs of a config that the scheduler's Add refuses, with Add's error,
// and accepts the others: it makes Add's checks without a scheduler, in the daemon's scheduler
// location (UTC). The jobs pass config.Load, which makes Add's other check (a name twice).
func TestCheckJobIsAdd(t *testing.T) {
	cfg, err := config.Parse("c.yaml", []byte(`nodes: ['127.0.0.1:1', '127.0.0.1:2', '127.0.0.1:3']
jobs:
  - {name: hourly, schedule: '@hourly', command: [x]}
  - {name: ttl-5ms, schedule: '@hourly', lock_ttl: 5ms, command: [x]}
  - {name: ttl-7ms, schedule: '@hourly', lock_ttl: 7ms, command: [x]}
  - {name: ttl-8ms, schedule: '@hourly', lock_ttl: 8ms, command: [x]}
  - {name: ttl-max, schedule: '@hourly', lock_ttl: 1m, command: [x]}
  - {name: jitter-9s, schedule: '@every 10s', jitter: 9s, command: [x]}
  - {name: jitter-10s, schedule: '@every 10s', jitter: 10s, command: [x]}
  - {name: jitter-h-59m, schedule: 'H * * * *', jitter: 59m, command: [x]}
  - {name: jitter-h-1h, schedule: 'H * * * *', jitter: 1h, command: [x]}
  - {name: jitter-weekdays, schedule: '0 9 * * 1-5', jitter: 23h, command: [x]}
`))
	require.NoError(t, err)
	clients, err := nodes.Clients(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { nodes.Close(clients) })
	locks, err := nodes.LockClient(cfg, clients, "test")
	require.NoError(t, err)
	t.Cleanup(func() { _ = locks.Close() })
	sched, err := scheduler.New(locks, scheduler.WithPrefix(cfg.Prefix))
	require.NoError(t, err)
	t.Cleanup(func() { _ = sched.Stop(context.Background()) })

	refused := 0
	for _, j := range cfg.Jobs {
		jj := job.Job{Name: j.Name, Spec: j.Schedule, Handler: func(context.Context) error { return nil }, Options: j.Options()}
		want := sched.Add(jj)
		got := checkJob(locks, jj)
		if want == nil {
			assert.NoError(t, got, j.Name)
			continue
		}
		refused++
		if assert.Error(t, got, j.Name) {
			assert.Equal(t, want.Error(), got.Error(), j.Name)
		}
	}
	assert.Equal(t, 4, refused, "the cases that Add refuses")
}
