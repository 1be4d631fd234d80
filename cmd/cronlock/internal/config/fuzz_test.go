package config_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/internal/jobseam"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// goName matches the Go names of job.Options' fields, which messages must not show.
var goName = regexp.MustCompile(`Options\.|\b(Timeout|LockTTL|RenewEvery|Overlap|Retries|CatchUp)\b|job\.(Forbid|Allow)`)

// FuzzParse: Parse never panics; a file it accepts holds what the daemon needs (nodes in a
// count that makes a safe quorum, jobs with unique valid names, specs and commands); a file it
// refuses gets errors that each start with the file's name.
func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		docExample,
		good,
		"",
		"nodes: [a:1]\njobs: [{name: j, schedule: '@every 1s', command: [true]}]\n",
		"allow_even_nodes: true\nnodes: [a:1, {addr: 'b:2', tls: true, db: 3, username: u, password_env: PW}]\njobs: [{name: j, schedule: '*/5 * * * *', command: [sh, -c, x], timeout: 1m, lock_ttl: 10s, renew_every: 3s, overlap: allow, retries: 2, catch_up: 1h}]\n",
		"x-d: &d {timeout: 5m, command: [x]}\nnodes: &n [a:1]\njobs:\n  - <<: *d\n    name: a\n    schedule: '@hourly'\n  - {<<: [*d, *d], name: b, schedule: '@daily'}\n",
		"nodes: [a:1, b, a:1]\njobs:\n  - name: my job\n    schedule: */5\n",
		"---\nnodes: []\n---\n",
		"jobs:\n  - *missing\n",
		"nodes: [a:1]\njobs: [{name: j, schedule: 'CRON_TZ=Nowhere/Zone 0 9 * * *', command: [x]}]\n",
		"nodes: [a:1]\njobs: [{name: j, schedule: '@hourly', command: [x], lock_ttl: 9s, renew_every: 6s}]\n",
		"max_ttl: 1s\nkill_grace: -1s\nhttp: x\ntracing: {otlp_endpoint: 'ftp://x', service_name: ''}\nprefix: ' '\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := config.Parse("f.yaml", []byte(s))
		if err != nil {
			if c != nil {
				t.Errorf("Parse returned a config with an error")
			}
			for line := range strings.SplitSeq(err.Error(), "\n") {
				// A crontab: key may name a file of this host, whose problems name it.
				if !strings.HasPrefix(line, "f.yaml") && !strings.Contains(s, "crontab") {
					t.Errorf("error line does not name the file: %q", line)
				}
				if goName.MatchString(line) {
					t.Errorf("error line names a Go field, not the YAML key: %q", line)
				}
			}
			var ce *config.Error
			if !errors.As(err, &ce) {
				t.Errorf("error is not a *config.Error: %v", err)
			}
			return
		}
		if n := len(c.Nodes); n == 0 || (n%2 == 0 && !c.AllowEvenNodes) {
			t.Errorf("accepted %d nodes (allow_even_nodes %v)", n, c.AllowEvenNodes)
		}
		if len(c.Jobs) == 0 {
			t.Errorf("accepted no jobs")
		}
		names := map[string]bool{}
		for _, j := range c.Jobs {
			if names[j.Name] {
				t.Errorf("accepted job name %q twice", j.Name)
			}
			names[j.Name] = true
			nop := func(context.Context) error { return nil }
			if err := (job.Job{Name: j.Name, Spec: j.Schedule, Handler: nop, Options: j.Options()}).Validate(); err != nil {
				t.Errorf("accepted a job that job.Validate refuses: %v", err)
			}
			if _, err := scheduler.ParseSpec(j.Schedule, time.UTC); err != nil {
				t.Errorf("accepted a bad spec: %v", err)
			}
			if len(j.Command) == 0 || strings.TrimSpace(j.Command[0]) == "" {
				t.Errorf("accepted command %q", j.Command)
			}
			if ttl := jobseam.WithDefaults(j.Options()).LockTTL; ttl > c.MaxTTL {
				t.Errorf("accepted lock_ttl %v above max_ttl %v", ttl, c.MaxTTL)
			}
		}
	})
}

// FuzzImportCrontab: ImportCrontab never panics; the YAML it prints for a crontab it accepts
// is a config's jobs: that Parse accepts; the problems of one it refuses each name the
// crontab's file and line.
func FuzzImportCrontab(f *testing.F) {
	for _, seed := range []string{
		exampleCrontab,
		"",
		"@reboot x\n* * * * * root y\n",
		"# cronlock: name=a timeout=1m retries='2' overlap=\"allow\"\n*/5 * * * * * a %b%c\\%\n",
		"A = 'x'\nCRON_TZ=Nowhere\nMAILTO=m\n@every 1s z\n@every 1s z\n",
		"# cronlock: x=\"\n\n* * *\n61 * * * * q\n",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := config.ImportCrontab("crontab", []byte(s))
		if err != nil {
			for line := range strings.SplitSeq(err.Error(), "\n") {
				if !strings.HasPrefix(line, "crontab:") || goName.MatchString(line) {
					t.Errorf("error line does not name the crontab, or names a Go field: %q", line)
				}
			}
			return
		}
		if _, err := config.Parse("f.yaml", append([]byte("nodes: [a:1]\n"), out...)); err != nil {
			t.Errorf("the YAML of an accepted crontab is refused: %v\n%s", err, out)
		}
	})
}
