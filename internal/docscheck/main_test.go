package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const lockSrc = `package redlock

import "time"

const DefaultMaxTTL = time.Minute

var ErrNotAcquired error

type Option func()

func New() *Client { return nil }

type Client struct{}

func (c *Client) MaxTTL() time.Duration { return 0 }

type Base struct{ Attempt int }

type Options[T any] struct {
	Base
	Retries int
}

func (o *Options[T]) Check() error { return nil }

type Node interface{ Eval() }
`

const doc = "# Doc\n" +
	"`redlock.New`, `redlock.Client`, `redlock.DefaultMaxTTL`, `redlock.ErrNotAcquired`\n" +
	"`Client.MaxTTL` and `Client.MaxTTL()`, `redlock.Client.MaxTTL`, `Options.Retries`, `Options.Check`\n" +
	"`Options.Attempt` (embedded), `Options.Base`, `Node.Eval`\n" +
	"not checked: `locks.Acquire`, `slog.Default`, `JOB.TICK`, `README.md`, `jobs[0].Retries`, `Context.Done`, `x.Client.Nope`\n" +
	"```go\n" +
	"`redlock.InFence`\n" +
	"```\n" +
	"`redlock.Gone` and `Client.Gone`\n" +
	"`redlock.New.X`, `redlock.Client.Gone`, `Options.Gone`\n"

func TestCheckNamesOnlyWhatIsMissing(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(root, "redlock"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "redlock", "lock.go"), []byte(lockSrc), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "redlock", "x_test.go"), []byte("package redlock\n\nfunc Gone() {}\n"), 0o644))
	a, err := loadAPI(root)
	require.NoError(t, err)

	assert.Equal(t, []problem{
		{line: 9, name: "redlock.Gone", why: "package redlock has no exported Gone"},
		{line: 9, name: "Client.Gone", why: "no type Client has a field or method Gone"},
		{line: 10, name: "redlock.New.X", why: "redlock.New is not a type, so it has no member X"},
		{line: 10, name: "redlock.Client.Gone", why: "type redlock.Client has no field or method Gone"},
		{line: 10, name: "Options.Gone", why: "no type Options has a field or method Gone"},
	}, a.check(doc))
}

func TestLoadAPIWithoutGoFilesFails(t *testing.T) {
	_, err := loadAPI(t.TempDir())
	assert.ErrorContains(t, err, "no Go package under")
}

func TestNarrationFindsHistoryOutsideCode(t *testing.T) {
	text := "# Doc\n" +
		"A run that succeeded is done. Previously it was retried.\n" +
		"`middleware.Lock` as it was before a succeeded run counted as done\n" +
		"Now the checker has check 8. It used to be slower.\n" +
		"### Why `go test -bench` gave redsync a slower pair than this\n" +
		"```sh\n" +
		"# previously: make chaos\n" +
		"```\n" +
		"A lock that a quorum no longer holds is lost before the lock can expire; now and then a node is slow.\n"
	var got []string
	for _, p := range narration(text) {
		got = append(got, fmt.Sprintf("%d %s", p.line, p.name))
	}
	assert.Equal(t, []string{"2 Previously", "3 as it was before", "4 Now", "4 used to be", "5 gave redsync a slower"}, got)
}
