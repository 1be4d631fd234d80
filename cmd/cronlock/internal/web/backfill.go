package web

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/backfill"
	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

func backfillLine(sum scheduler.BackfillSummary) backfill.Line {
	return backfill.Line{Ticks: sum.Ticks, Ran: sum.Ran, Failed: sum.Failed, Done: sum.Done, Elsewhere: sum.Elsewhere, Paused: sum.Paused}
}

// backfill serves POST /jobs/{name}/backfill, behind the token: the form fields from and to
// (RFC 3339), max (optional: the most ticks; default scheddefault.BackfillMax) and
// include_paused (optional, a boolean: also run the ticks skipped while the job was paused),
// and by (optional, see operator). It
// runs the backfill on this daemon and streams its progress as backfill.Lines; a request
// refused before its first tick gets 400 (404 for an unknown job, 503 without a quorum) and
// the reason. The client going away stops the backfill after the tick under way.
func (c *control) backfill(w http.ResponseWriter, r *http.Request) {
	if !c.authorized(w, r) {
		return
	}
	ctx, ok := c.operator(w, r)
	if !ok {
		return
	}
	var times [2]time.Time
	for i, field := range []string{"from", "to"} {
		t, err := time.Parse(time.RFC3339Nano, r.PostForm.Get(field))
		if err != nil {
			http.Error(w, fmt.Sprintf("%s: %q is not an RFC 3339 time: give e.g. 2026-12-01T00:00:00Z", field, r.PostForm.Get(field)), http.StatusBadRequest)
			return
		}
		times[i] = t
	}
	opts := scheduler.BackfillOptions{}
	if s := r.PostForm.Get("max"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			http.Error(w, fmt.Sprintf("max: %q: give a positive number of ticks", s), http.StatusBadRequest)
			return
		}
		opts.Max = n
	}
	if s := r.PostForm.Get("include_paused"); s != "" {
		b, err := strconv.ParseBool(s)
		if err != nil {
			http.Error(w, fmt.Sprintf("include_paused: %q: give true or false", s), http.StatusBadRequest)
			return
		}
		opts.IncludePaused = b
	}
	rc := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	started := false
	send := func(line backfill.Line) {
		if !started {
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			started = true
		}
		_ = rc.SetWriteDeadline(time.Now().Add(httpWriteTimeout)) // each line gets the server's write bound
		_ = enc.Encode(line)
		_ = rc.Flush()
	}
	opts.Progress = func(tick time.Time, outcome string, sum scheduler.BackfillSummary) {
		line := backfillLine(sum)
		line.Tick, line.Outcome = &tick, outcome
		send(line)
	}
	sum, err := c.sched.Backfill(ctx, r.PathValue("name"), times[0], times[1], opts)
	switch {
	case err != nil && !started && errors.Is(err, scheduler.ErrUnknownJob):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil && !started && errors.Is(err, redlock.ErrQuorumUnavailable):
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
	case err != nil && !started:
		http.Error(w, err.Error(), http.StatusBadRequest)
	default:
		line := backfillLine(sum)
		line.End = true
		if err != nil {
			line.Error = err.Error()
		}
		send(line)
	}
}
