package redlock

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"
)

// script is a Lua script, with its source for nodes that do not have it cached: the
// package's own scripts have it; broadcast's come from the caller, and go-redis keeps theirs.
type script struct {
	*redis.Script
	src string
	sha any // Hash(), boxed once
}

func newScript(src string) *script {
	s := redis.NewScript(src)
	return &script{Script: s, src: src, sha: s.Hash()}
}

// callerScript wraps a script of the caller's, whose source go-redis keeps.
func callerScript(s *redis.Script) *script { return &script{Script: s, sha: s.Hash()} }

// call is one call of a script, its EVALSHA command built once however many nodes it is sent
// to: each argument is boxed once, not once per node. It is read-only once built, so the
// requests of a fanout share it.
type call struct {
	s    *script
	keys []string
	cmd  []any // "evalsha", sha, numkeys, keys..., argv...
	buf  [16]any
}

func (s *script) call(keys []string, argv ...any) *call {
	k := &call{s: s, keys: keys}
	if n := 3 + len(keys) + len(argv); n <= len(k.buf) {
		k.cmd = k.buf[:0]
	} else {
		k.cmd = make([]any, 0, n)
	}
	k.cmd = append(k.cmd, "evalsha", s.sha, len(keys))
	for _, key := range keys {
		k.cmd = append(k.cmd, key)
	}
	k.cmd = append(k.cmd, argv...)
	return k
}

// argv returns the call's arguments after its keys.
func (k *call) argv() []any { return k.cmd[3+len(k.keys):] }

// doer is a node that sends any command: *redis.Client and *redis.ClusterClient are.
type doer interface {
	Do(ctx context.Context, args ...any) *redis.Cmd
}

// run sends the call to node directly, not through its link: EVALSHA, and EVAL once if the
// node does not have the script cached (it then caches it). It is for background work, which
// must not wait in the link's queue.
func (k *call) run(ctx context.Context, node Node) *redis.Cmd {
	d, ok := node.(doer)
	if !ok {
		return k.s.Run(ctx, node, k.keys, k.argv()...)
	}
	cmd := d.Do(ctx, k.cmd...)
	if noScript(cmd) {
		cmd = d.Do(ctx, k.eval()...)
	}
	return cmd
}

// noScript reports whether cmd failed because the node does not have the script cached.
func noScript(cmd *redis.Cmd) bool {
	err := cmd.Err()
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// eval returns the call as an EVAL command, with the script's source.
func (k *call) eval() []any {
	eval := slices.Clone(k.cmd)
	eval[0], eval[1] = "eval", k.s.src
	return eval
}
