// Package backfill is the client side of a daemon's backfill endpoint (POST
// /jobs/{name}/backfill), which `cronlock backfill` asks, and the lines of its answer, which
// the web package's handler writes.
package backfill

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
)

// Line is a line of the answer of POST /jobs/{name}/backfill (JSON, one object a
// line): one after each tick, then one with End set and the error, if the backfill stopped.
type Line struct {
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

// Request is what Ask asks for: the range [From, To], the most ticks it may
// have, whether to run the ticks skipped while the job was paused too, and who asks.
type Request struct {
	From, To      time.Time
	Max           int
	IncludePaused bool
	By            string
}

// Ask asks the daemon whose HTTP server is at base (http://host:port) to backfill
// the job as br says, with the bearer token, and calls progress with each tick's line. It
// returns the last line (End set) when the daemon's answer ended; ending ctx stops the
// daemon's backfill after the tick under way, and returns ctx's error.
func Ask(ctx context.Context, base, token, name string, br Request, progress func(Line)) (Line, error) {
	var last Line
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
