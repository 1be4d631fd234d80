package redlock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed scripts/markdone.lua
	markDoneSrc    string
	markDoneScript = newScript(markDoneSrc)
)

// markedDone is what markDone left on the nodes.
type markedDone struct {
	// marked is the number of nodes that keep the lock's done marker.
	marked int
	// newer lists the holders that markDone found with a fencing token above this lock's,
	// one per node: each took the primary key after this lock was acquired, while its work
	// was still going on, so the work the lock guards ran twice. A holder with a lower token
	// on its node is left alone too but not listed: it may be older (a leftover), or newer on
	// a node whose counter lagged; a newer holder of a quorum is above this lock's token on
	// at least one node.
	newer []Holder
}

// markDone keeps the lock's primary key as a done marker for keep (as release with keepDone
// does) on every node where no other holder took it — where the key is ours, or absent
// because it expired — and releases the other keys where they are ours. It is for work that
// completed after the lock may have been lost (a lease that gave up, a process paused past
// the TTL): the completed work must not run again, and its marker must not cover the run of a
// newer holder either. Those holders are left alone, and reported in markedDone.newer.
//
// It asks every node, in parallel, and waits for each until the node timeout. It fails with an
// error matching ErrLockLost when other holders keep the marker off a quorum, or
// ErrQuorumUnavailable when too many nodes failed; markedDone then says what was marked. The lock
// counts as released afterwards (Release fails; a late reply of its acquisition is kept done
// too). keep must be positive.
func (l *Lock) markDone(ctx context.Context, keep time.Duration) (markedDone, error) {
	if keep <= 0 {
		return markedDone{}, fmt.Errorf("redlock: mark done (%v): keep must be positive: give how long the done marker lives", keep)
	}
	c := l.c
	ms := formatMillis(keep)
	l.markReleased(ms)
	var done markedDone
	t := tally{n: len(c.nodes), quorum: c.quorum}
	f := &fan{call: markDoneScript.call(l.keys, l.valueArg, ms, l.label), replicas: l.replicas,
		parse: func(node int, cmd *redis.Cmd) reply {
			res, err := cmd.Slice()
			if err != nil {
				return reply{node: node, outcome: outcomeError, err: err}
			}
			if code, _ := res[0].(int64); code == 0 {
				return reply{node: node, outcome: outcomeOK}
			}
			if len(res) < 6 {
				return reply{node: node, outcome: outcomeError, err: fmt.Errorf("unexpected reply to the mark-done script: %v", res)}
			}
			label, _ := res[1].(string)
			meta, _ := res[2].(string)
			state, _ := res[3].(string)
			token, _ := res[4].(string)
			pttl, _ := res[5].(int64)
			h := &Holder{Key: l.keys[0], Label: label, Metadata: meta, Done: state == "done", TTL: time.Duration(pttl) * time.Millisecond}
			h.Token, _ = strconv.ParseUint(token, 10, 64)
			return reply{node: node, outcome: outcomeRefused, holder: h}
		}}
	// Every node's reply counts: decide only when all are in.
	_, err := c.fanout(context.WithoutCancel(ctx), f, c.all(), c.nodeTimeout(l.ttl), func(r reply) bool {
		t.add(c, r)
		if r.holder != nil && r.holder.Token > l.token {
			done.newer = append(done.newer, *r.holder)
		}
		return false
	})
	done.marked = t.ok
	if err != nil {
		return done, err
	}
	if t.ok < c.quorum {
		return done, withContext(ctx, &quorumError{Op: "mark done", Key: l.keys[0], Reason: t.reason(ErrLockLost),
			OK: t.ok, Refused: t.refused, Failed: t.failed, Nodes: t.errs})
	}
	return done, nil
}
