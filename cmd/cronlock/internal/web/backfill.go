package web

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cronlock/cronlock/redlock"
	"github.com/cronlock/cronlock/scheduler"
)

// BackfillLine is a line of the answer of POST /jobs/{name}/backfill (JSON, one object a
// line): one after each tick, then one with End set and the error, if the backfill stopped.
type BackfillLine struct {
	Tick      *time.Time `json:"tick,omitempty"`
	Outcome   string     `json:"outcome,omitempty"`
	Ticks     int        `json:"ticks"`
	Ran       int        `json:"ran"`
	Failed    int        `json:"failed"`
	Done      int        `json:"done"`
	Elsewhere int        `json:"elsewhere"`
	Paused    int        `json:"paused"`
	End       bool       `json:"end,omitempty"`
	Error     string     `json:"error,omitempty"`
}

func backfillLine(sum scheduler.BackfillSummary) BackfillLine {
	return BackfillLine{Ticks: sum.Ticks, Ran: sum.Ran, Failed: sum.Failed, Done: sum.Done, Elsewhere: sum.Elsewhere, Paused: sum.Paused}
}

// backfill serves POST /jobs/{name}/backfill, behind the token: the form fields from and to
// (RFC 3339), max (optional: the most ticks; default scheduler.DefaultBackfillMax) and
// include_paused (optional, a boolean: also run the ticks skipped while the job was paused),
// and by (optional, see operator). It
// runs the backfill on this daemon and streams its progress as BackfillLines; a request
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
	send := func(line BackfillLine) {
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

// BackfillRequest is what RequestBackfill asks for: the range [From, To], the most ticks it may
// have, whether to run the ticks skipped while the job was paused too, and who asks.
type BackfillRequest struct {
	From, To      time.Time
	Max           int
	IncludePaused bool
	By            string
}

// RequestBackfill asks the daemon whose HTTP server is at base (http://host:port) to backfill
// the job as br says, with the bearer token, and calls progress with each tick's line. It
// returns the last line (End set) when the daemon's answer ended; ending ctx stops the
// daemon's backfill after the tick under way, and returns ctx's error.
func RequestBackfill(ctx context.Context, base, token, name string, br BackfillRequest, progress func(BackfillLine)) (BackfillLine, error) {
	var last BackfillLine
	form := url.Values{"from": {br.From.Format(time.RFC3339Nano)}, "to": {br.To.Format(time.RFC3339Nano)}, "max": {strconv.Itoa(br.Max)},
		"include_paused": {strconv.FormatBool(br.IncludePaused)}, "by": {br.By}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/jobs/"+url.PathEscape(name)+"/backfill", strings.NewReader(form.Encode()))
	if err != nil {
		return last, fmt.Errorf("the daemon's address %q: %w", base, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return last, fmt.Errorf("the daemon at %s: %w (is a daemon of this config running there?)", req.URL.Host, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return last, fmt.Errorf("the daemon answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		if err := json.Unmarshal(lines.Bytes(), &last); err != nil {
			return last, fmt.Errorf("the daemon's answer: %w", err)
		}
		if !last.End {
			progress(last)
		}
	}
	switch {
	case ctx.Err() != nil:
		return last, ctx.Err()
	case !last.End:
		return last, fmt.Errorf("the daemon's answer ended early: %w", errors.Join(lines.Err(), io.ErrUnexpectedEOF))
	}
	return last, nil
}
