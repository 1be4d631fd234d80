// Package lockkeys is `cronlock locks`: the lock keys of the config's jobs on every node (tick,
// run, attempts, fence, pause, history and trigger keys), read by their type with SCAN, never
// KEYS, and on a node that is a Redis Cluster on each of its primaries. It reads the jobs' key
// layout from packages redlock and middleware, and writes nothing.
package lockkeys

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/cmd/cronlock/internal/nodes"
	"github.com/cronlock/cronlock/internal/layout"
)

// Locks prints the lock keys of cfg's jobs (of the job named job only, when it is not "") on
// every node, each node within timeout (cronlock locks). It fails when fewer than a quorum of
// nodes answer.
func Locks(ctx context.Context, cfg *config.Config, job string, timeout time.Duration, stdout io.Writer) error {
	clients, err := nodes.Clients(cfg)
	if err != nil {
		return err
	}
	defer nodes.Close(clients)

	match := layout.JobMatch(cfg.Prefix, job)
	rows := make([][]keyRow, len(clients))
	errs := make([]error, len(clients))
	nodes.EachNode(ctx, clients, timeout, func(ctx context.Context, i int, c redis.UniversalClient) {
		if cc, ok := c.(*redis.ClusterClient); ok {
			rows[i], errs[i] = scanCluster(ctx, cc, cfg.Prefix, match)
		} else {
			rows[i], errs[i] = scanLocks(ctx, c.(*redis.Client), cfg.Prefix, match)
		}
		for r := range rows[i] {
			rows[i][r].node = i
		}
	})
	var all []keyRow
	answered := 0
	var status []string
	for i, n := range cfg.Nodes {
		if errs[i] != nil {
			status = append(status, fmt.Sprintf("%s (error: %v)", n.Name(), errs[i]))
			continue
		}
		answered++
		listed := slices.DeleteFunc(rows[i], func(r keyRow) bool { return r.Kind == layout.KindMarker })
		if markers := len(rows[i]) - len(listed); markers > 0 {
			status = append(status, fmt.Sprintf("%s (%d keys; %d history markers not listed)", n.Name(), len(listed), markers))
		} else {
			status = append(status, fmt.Sprintf("%s (%d keys)", n.Name(), len(listed)))
		}
		all = append(all, listed...)
	}
	fmt.Fprintf(stdout, "keys %s on %d nodes (quorum %d): %s\n", match, len(clients), cfg.Quorum(), strings.Join(status, ", "))
	slices.SortFunc(all, func(a, b keyRow) int {
		return cmp.Or(strings.Compare(a.Job, b.Job), cmp.Compare(a.kindOrder(), b.kindOrder()),
			a.Tick.Compare(b.Tick), strings.Compare(a.Rest, b.Rest), cmp.Compare(a.node, b.node))
	})
	if len(all) == 0 {
		fmt.Fprintln(stdout, "no lock keys")
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "JOB\tKEY\tNODE\tSTATE\tHOLDER\tTOKEN\tTTL\tVALUE")
		for _, r := range all {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Job, r.keyName(), cmp.Or(r.member, cfg.Nodes[r.node].Addr),
				cmp.Or(r.state, "-"), cmp.Or(r.holder, "-"), cmp.Or(r.token, "-"), formatTTL(r.pttl), cmp.Or(r.value, "-"))
		}
		tw.Flush()
	}
	if answered < cfg.Quorum() {
		return fmt.Errorf("only %d of %d nodes answered, fewer than the quorum of %d: what they hold does not decide any lock", answered, len(clients), cfg.Quorum())
	}
	return nil
}

// keyRow is one lock key on one node.
type keyRow struct {
	key string
	layout.Key
	node   int
	member string // the Cluster member the key is on ("" on a standalone node)
	state  string // held, done, skipped; paused; N records; N attempts; the type of another key
	holder string
	token  string
	pttl   time.Duration // -1: no TTL, -2: gone
	value  string        // short prefix of the lock value
}

// kinds are the kinds of keys in the order locks lists them.
var kinds = []layout.Kind{layout.KindRun, layout.KindTick, layout.KindAttempts, layout.KindTrigger, layout.KindFence,
	layout.KindPaused, layout.KindHistory, layout.KindOutput, layout.KindRunning}

func (r keyRow) kindOrder() int {
	if i := slices.Index(kinds, r.Kind); i >= 0 {
		return i
	}
	return len(kinds)
}

func (r keyRow) keyName() string {
	switch r.Kind {
	case layout.KindTick, layout.KindAttempts:
		return string(r.Kind) + " " + r.Tick.UTC().Format(time.RFC3339Nano)
	case layout.KindTrigger:
		return "trigger " + r.Trigger
	case layout.KindRun, layout.KindFence, layout.KindPaused, layout.KindHistory, layout.KindRunning:
		return string(r.Kind)
	case layout.KindOutput:
		return "history output"
	}
	return r.key
}

// ValuePrefix is how much of a lock value locks shows: enough to tell holders apart at a
// glance, far too little to act as the holder.
const ValuePrefix = 6

// scanLocks reads the lock keys matching match on one node.
func scanLocks(ctx context.Context, c *redis.Client, prefix, match string) ([]keyRow, error) {
	seen := map[string]bool{}
	var keys []string
	iter := c.Scan(ctx, 0, match, 1000).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		return nil, err
	}
	var rows []keyRow
	for batch := range slices.Chunk(keys, 500) {
		pipe := c.Pipeline()
		types := make([]*redis.StatusCmd, len(batch))
		for i, k := range batch {
			types[i] = pipe.Type(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, err // TYPE fails only when the node does
		}
		pipe = c.Pipeline()
		reads := make([]keyRead, len(batch))
		for i, k := range batch {
			reads[i] = readKey(ctx, pipe, k, types[i].Val())
		}
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			if _, reply := errors.AsType[redis.Error](err); !reply {
				return nil, err // the node, not a key: nothing was read
			}
		}
		for i, k := range batch {
			r := keyRow{key: k, Key: layout.ParseKey(prefix, k), pttl: -2}
			if r.read(types[i].Val(), reads[i]) {
				rows = append(rows, r)
			}
		}
	}
	return rows, nil
}

// keyRead is the commands that read one key, by its type.
type keyRead struct {
	hash *redis.MapStringStringCmd // a hash: a lock
	str  *redis.StringCmd          // a string: fencing counter, pause, history marker
	xlen *redis.IntCmd             // a stream: the run history, or its outputs
	pttl *redis.DurationCmd
}

// readKey queues on pipe the commands that read key, of type typ.
func readKey(ctx context.Context, pipe redis.Pipeliner, key, typ string) keyRead {
	var rd keyRead
	switch typ {
	case "none":
		return rd // gone since the scan
	case "hash":
		rd.hash = pipe.HGetAll(ctx, key)
	case "string":
		rd.str = pipe.Get(ctx, key)
	case "stream":
		rd.xlen = pipe.XLen(ctx, key)
	}
	rd.pttl = pipe.PTTL(ctx, key)
	return rd
}

// read fills r from rd, the reads of its key of type typ. It returns false when the key is
// gone.
func (r *keyRow) read(typ string, rd keyRead) bool {
	if rd.pttl == nil {
		return false
	}
	var err error
	switch typ {
	case "hash":
		var h map[string]string
		if h, err = rd.hash.Result(); err == nil && len(h) == 0 {
			return false
		}
		if r.Kind == layout.KindRunning {
			r.state = fmt.Sprintf("%d in flight", len(h))
		} else {
			r.readLock(h)
		}
	case "string":
		var v string
		if v, err = rd.str.Result(); errors.Is(err, redis.Nil) {
			return false
		}
		switch r.Kind {
		case layout.KindFence:
			r.token = v
		case layout.KindAttempts:
			r.state = v + " attempts"
			if v == "1" {
				r.state = "1 attempt"
			}
		case layout.KindPaused:
			p := layout.ParsePause(v)
			r.state, r.holder, r.value = "paused", p.By, strconv.Quote(p.Reason)
		default:
			r.state = typ
		}
	case "stream":
		var n int64
		n, err = rd.xlen.Result()
		r.state = fmt.Sprintf("%d records", n)
	default:
		r.state = typ
	}
	if err != nil {
		r.state = "error: " + err.Error()
	}
	r.pttl = rd.pttl.Val()
	return true
}

// readLock fills r from h, a lock's hash.
func (r *keyRow) readLock(h map[string]string) {
	l := layout.ParseLock(h)
	r.holder, r.token = l.Label, l.Token
	switch {
	case l.Skipped():
		r.state = "skipped"
	case l.Done:
		r.state = "done"
	default:
		r.state = "held"
		if l.Nested > 0 {
			r.state = fmt.Sprintf("held (+%d nested)", l.Nested)
		}
	}
	if v := l.Value; v != "" {
		r.value = v[:min(len(v), ValuePrefix)] + "…"
	}
}

// scanCluster reads the lock keys matching match on every primary of a Cluster node. A primary
// that does not answer fails the node: its keys would be missing.
func scanCluster(ctx context.Context, cc *redis.ClusterClient, prefix, match string) ([]keyRow, error) {
	var mu sync.Mutex
	var rows []keyRow
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		addr := c.Options().Addr
		found, err := scanLocks(ctx, c, prefix, match)
		if err != nil {
			return fmt.Errorf("primary %s: %w", addr, err)
		}
		for i := range found {
			found[i].member = addr
		}
		mu.Lock()
		rows = append(rows, found...)
		mu.Unlock()
		return nil
	})
	return rows, err
}

func formatTTL(d time.Duration) string {
	switch {
	case d == -1:
		return "none"
	case d < 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(100 * time.Millisecond).String()
}
