package config_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/cronlock/cronlock/cmd/cronlock/internal/config"
	"github.com/cronlock/cronlock/job"
)

// exampleCrontab has every kind of line: comments, variables (quoted, with spaces around =),
// CRON_TZ, a 5-field line with options, a 6-field line, a descriptor, and % for stdin.
const exampleCrontab = `# the report jobs
SHELL=/bin/sh
GREETING = "hello world"
CRON_TZ=Europe/Paris
# cronlock: name=greet timeout=10s retries=1 overlap=allow
*/5 * * * * echo "$GREETING"
*/10 * * * * * /usr/local/bin/backup --fast

@hourly cat%line one%line 2 \% literal
TZ=America/New_York
0 3 * * * /bin/report.sh 'a' | gzip
`

// writeCrontab writes a config naming a crontab beside it (by a relative path), and the
// crontab; it returns the config's path.
func writeCrontab(t *testing.T, crontab string) string {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "crontab"), []byte(crontab), 0o644))
	path := filepath.Join(dir, "cronlock.yaml")
	require.NoError(t, os.WriteFile(path, []byte("nodes: [a:1]\ncrontab: crontab\n"), 0o600))
	return path
}

// view is what a job does, without where it is written.
type view struct {
	Name, Schedule string
	Command        []string
	Env            []string
	Options        job.Options
}

func viewOf(t *testing.T, jobs []config.Job) []view {
	t.Helper()
	var out []view
	for _, j := range jobs {
		env, err := j.Environ(nil)
		require.NoError(t, err)
		out = append(out, view{j.Name, j.Schedule, j.Command, env, j.Options()})
	}
	return out
}

func TestCrontab(t *testing.T) {
	path := writeCrontab(t, exampleCrontab)
	c, err := config.Load(path)
	require.NoError(t, err)
	crontab := filepath.Join(filepath.Dir(path), "crontab")
	assert.Equal(t, crontab, c.Crontab)
	env := []string{"SHELL=/bin/sh", "GREETING=hello world"}
	assert.Equal(t, []view{
		{"greet", "CRON_TZ=Europe/Paris */5 * * * *", []string{"/bin/sh", "-c", `echo "$GREETING"`}, env,
			job.Options{Timeout: 10 * time.Second, Overlap: job.Allow, Retries: 1}},
		{"backup-fast-2427dcc4", "CRON_TZ=Europe/Paris */10 * * * * *", []string{"/bin/sh", "-c", "/usr/local/bin/backup --fast"}, env, job.Options{}},
		{"cat-3ccfd951", "CRON_TZ=Europe/Paris @hourly", []string{"/bin/sh", "-c", "printf %s 'line one\nline 2 % literal' | {\ncat\n}"}, env, job.Options{}},
		{"report-sh-a-gzip-e62cfa6e", "CRON_TZ=Europe/Paris 0 3 * * *", []string{"/bin/sh", "-c", "/bin/report.sh 'a' | gzip"},
			append(env, "TZ=America/New_York"), job.Options{}},
	}, viewOf(t, c.Jobs))
	for i, line := range []int{6, 7, 9, 11} {
		assert.Equal(t, crontab, c.Jobs[i].File)
		assert.Equal(t, line, c.Jobs[i].Line, "jobs[%d]", i)
	}

	// The text after the first % is the command's input, every other % a newline, \% a %.
	out, err := exec.Command(c.Jobs[2].Command[0], c.Jobs[2].Command[1:]...).Output()
	require.NoError(t, err)
	assert.Equal(t, "line one\nline 2 % literal", string(out))
}

// TZ= is the schedules' zone where no CRON_TZ= is given; lines without either are in UTC.
func TestCrontabZones(t *testing.T) {
	c, err := config.Load(writeCrontab(t, "0 9 * * * a\nTZ=Asia/Tokyo\n0 9 * * * b\nCRON_TZ=UTC\n0 9 * * * c\nCRON_TZ=\n0 9 * * * d\n"))
	require.NoError(t, err)
	var got []string
	for _, j := range c.Jobs {
		got = append(got, j.Schedule)
	}
	assert.Equal(t, []string{"0 9 * * *", "CRON_TZ=Asia/Tokyo 0 9 * * *", "CRON_TZ=UTC 0 9 * * *", "CRON_TZ=Asia/Tokyo 0 9 * * *"}, got)
}

// Derived names depend on the line's schedule and command only: not on the host, the file's
// other lines or its variables.
// H in a crontab line, of 5 fields or 6 (a sixth word that only H makes a field), and a
// jitter= option.
func TestCrontabJitterAndH(t *testing.T) {
	path := writeCrontab(t, "# cronlock: name=spread jitter=30s\nH H * * * /bin/report\nH(0-9) H * * * mon /bin/weekly\n")
	c, err := config.Load(path)
	require.NoError(t, err)
	require.Len(t, c.Jobs, 2)
	assert.Equal(t, "H H * * *", c.Jobs[0].Schedule)
	assert.Equal(t, 30*time.Second, c.Jobs[0].Jitter)
	assert.Equal(t, "H(0-9) H * * * mon", c.Jobs[1].Schedule, "six fields: seconds first")
	assert.Equal(t, []string{"/bin/sh", "-c", "/bin/weekly"}, c.Jobs[1].Command)
	assert.Zero(t, c.Jobs[1].Jitter)
}

func TestCrontabDerivedNames(t *testing.T) {
	names := func(crontab string) []string {
		c, err := config.Load(writeCrontab(t, crontab))
		require.NoError(t, err)
		var out []string
		for _, j := range c.Jobs {
			out = append(out, j.Name)
		}
		return out
	}
	base := names("*/5 * * * * /usr/bin/report --daily\n")
	assert.Equal(t, []string{"report-daily-8b8a8b65"}, base)
	assert.Equal(t, base, names("# comment\nX=1\n\n*/5 * * * * /usr/bin/report --daily\n@hourly other\n")[:1])
	assert.NotEqual(t, base, names("*/6 * * * * /usr/bin/report --daily\n"), "another schedule is another job")
	assert.NotEqual(t, base, names("*/5 * * * * /usr/bin/report --weekly\n"), "another command is another job")
	long := names("@daily /opt/tools/" + strings.Repeat("word ", 20) + "\n")
	assert.Equal(t, []string{"word-word-word-word-word-word-word-word-f900d23b"}, long)
	assert.Equal(t, []string{"job-5f01eaee"}, names("@daily ./++ %stdin\n"), "no letters or digits: job-…")
}

func TestCrontabBad(t *testing.T) {
	for _, tc := range []struct {
		name, crontab string
		want          string // the error's first line, after "DIR/"
	}{
		{"@reboot", "@reboot /bin/true\n",
			"crontab:1: schedule: @reboot runs a command when a host boots, and a host's boot is no tick that one host of the cluster takes: run it from the host's own init system (e.g. a systemd unit), or give the line a schedule"},
		{"user field", "# nightly\n0 3 * * * root /usr/sbin/logrotate /etc/logrotate.conf\n",
			`crontab:2: "root" before the command is a user of this host, not a program: a user field, as in a system crontab (/etc/crontab, /etc/cron.d); cronlock runs every command as its own user: remove the user name (and run cronlock as that user)`},
		{"unknown option", "# cronlock: nmae=x\n* * * * * true\n",
			`crontab:1: nmae: unknown key: did you mean "name"? (known: name, timeout, lock_ttl, renew_every, overlap, retries, catch_up, jitter, output_level, output_limit, output_keep, working_dir)`},
		{"option the line gives", "# cronlock: schedule=@hourly\n* * * * * true\n",
			`crontab:1: schedule: unknown key (known: name, timeout, lock_ttl, renew_every, overlap, retries, catch_up, jitter, output_level, output_limit, output_keep, working_dir)`},
		{"bad option value", "\n# cronlock: timeout=10x\n* * * * * true\n", `crontab:2: timeout: "10x" is not a duration (e.g. 10m, 90s)`},
		{"bad jitter", "# cronlock: jitter=soon\n* * * * * true\n", `crontab:1: jitter: "soon" is not a duration (e.g. 10m, 90s)`},
		{"bad H", "H/0 * * * * true\n",
			`crontab:1: schedule: spec "H/0 * * * *": field 1 (minute) "H/0": the step after / must be a positive number, as in H/15; e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`},
		{"option refused by the job's checks", "# cronlock: retries=-1\n* * * * * true\n",
			`crontab:1: retries: -1 is negative: give the number of retries after a failed run, or 0 for none`},
		{"option without value", "# cronlock: timeout=\n* * * * * true\n",
			`crontab:1: timeout: has no value: write timeout=VALUE, without spaces around = (quote a value with spaces)`},
		{"option not key=value", "# cronlock: name\n* * * * * true\n",
			`crontab:1: "name" is not key=value: write the options as e.g. # cronlock: name=backup timeout=10m`},
		{"option unclosed quote", "# cronlock: name=\"a b\n* * * * * true\n", `crontab:1: name: the quote " opened is not closed: close it on the same line`},
		{"option given twice", "# cronlock: retries=1\n# cronlock: retries=2\n* * * * * true\n",
			`crontab:2: retries: given twice for the same job line: keep one`},
		{"option above a blank line", "# cronlock: name=a\n\n* * * * * true\n",
			`crontab:1: this # cronlock: comment is followed by a blank line, not by a job line: put it directly above the line of the job it configures`},
		{"option at the end", "* * * * * true\n# cronlock: name=a\n",
			`crontab:2: this # cronlock: comment is followed by the end of the file, not by a job line: put it directly above the line of the job it configures`},
		{"name with a space", "# cronlock: name='a b'\n* * * * * true\n", `crontab:1: name: contains ' ': use letters, digits and punctuation, without spaces`},
		{"bad CRON_TZ", "CRON_TZ=Mars/Olympus\n* * * * * true\n",
			`crontab:1: CRON_TZ: "Mars/Olympus" is not a time zone this host knows (unknown time zone Mars/Olympus): use an IANA name such as Europe/Paris or UTC`},
		{"MAILTO", "MAILTO=ops@example.com\n* * * * * true\n",
			`crontab:1: MAILTO: cronlock does not mail a job's output: it logs it (see output_level and output_limit); remove the line, or write MAILTO=""`},
		{"bad variable name", "A-B=1\n* * * * * true\n",
			`crontab:1: "A-B" is not a variable name (letters, digits and _): a NAME=value line sets a variable for the job lines below it`},
		{"CRONLOCK_ variable", "CRONLOCK_JOB=x\n* * * * * true\n", `crontab:1: env.CRONLOCK_JOB: CRONLOCK_JOB is set by cronlock for each run: give another name`},
		{"same line twice", "*/3 * * * * echo a\n*/3 * * * * echo a\n",
			`crontab:2: name: "echo-a-e346bde5" is already the name of the job on line 1: the two lines have the same schedule and command, so the same derived name: remove one, or name them apart, with a # cronlock: name=… comment above the line`},
		{"name given twice", "# cronlock: name=a\n@hourly x\n# cronlock: name=a\n@daily y\n",
			`crontab:3: name: "a" is already the name of the job on line 2: give each job line its own name, with a # cronlock: name=… comment above the line`},
		{"bad field", "61 * * * * echo b\n",
			`crontab:1: schedule: spec "61 * * * *": field 1 (minute) "61": end of range (61) above maximum (59); e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`},
		{"bad field of a line with seconds", "0 61 * * * * echo six\n",
			`crontab:1: schedule: spec "0 61 * * * *": field 2 (minute) "61": end of range (61) above maximum (59); e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`},
		{"unknown descriptor", "@fortnightly x\n",
			`crontab:1: schedule: spec "@fortnightly": unknown descriptor "@fortnightly": use @yearly, @monthly, @weekly, @daily, @hourly or @every <duration>; e.g. "*/5 * * * *" (every 5 minutes), "0 30 9 * * 1-5" (9:30:00 on weekdays), "@hourly", "@every 10s", "CRON_TZ=Europe/Paris 0 9 * * *"`},
		{"no command", "* * *\n",
			"crontab:1: has 3 words, and no command after the schedule: a job line is 5 schedule fields (minute hour day-of-month month day-of-week), or 6 with seconds first, or a descriptor such as @hourly, then the command"},
		{"only input", "@hourly %input\n", `crontab:1: command: is empty before the % that starts its input: give the command to run`},
		{"faster than min_interval", "@every 10ms x\n",
			`crontab:1: schedule: "@every 10ms" fires 10ms apart, more often than min_interval 1s: each tick starts a process on some host; give a slower schedule, or lower min_interval (e.g. min_interval: 10ms)`},
		{"no job lines", "# nothing yet\nA=1\n", `cronlock.yaml:2: crontab: DIR/crontab has no job lines: give at least one (e.g. "*/5 * * * * /usr/local/bin/report"), or leave crontab: out`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeCrontab(t, tc.crontab)
			_, err := config.Load(path)
			require.Error(t, err)
			dir := filepath.Dir(path) + "/"
			first, _, _ := strings.Cut(err.Error(), "\n")
			assert.Equal(t, tc.want, strings.ReplaceAll(strings.TrimPrefix(first, dir), dir, "DIR/"))
		})
	}
}

// Every problem of the crontab is reported, each with its line.
func TestCrontabReportsEveryProblem(t *testing.T) {
	_, err := config.Load(writeCrontab(t, "@reboot x\n@hourly ok\n# cronlock: nmae=y\n* * * * * z\nMAILTO=me\n"))
	require.Error(t, err)
	var lines []string
	for l := range strings.SplitSeq(err.Error(), "\n") {
		_, rest, _ := strings.Cut(l, "/crontab:")
		n, _, _ := strings.Cut(rest, ":")
		lines = append(lines, n)
	}
	assert.Equal(t, []string{"1", "3", "5"}, lines)
}

func TestCrontabInConfig(t *testing.T) {
	dir := t.TempDir()
	crontab := filepath.Join(dir, "jobs.crontab")
	require.NoError(t, os.WriteFile(crontab, []byte("# cronlock: name=backup\n@hourly x\n@daily y\n"), 0o600))
	write := func(config string) string {
		path := filepath.Join(dir, "c.yaml")
		require.NoError(t, os.WriteFile(path, []byte(config), 0o600))
		return path
	}

	// Beside jobs:, which come first; an absolute path.
	c, err := config.Load(write("nodes: [a:1]\njobs: [{name: report, schedule: '@hourly', command: [r]}]\ncrontab: " + crontab + "\n"))
	require.NoError(t, err)
	require.Len(t, c.Jobs, 3)
	assert.Equal(t, []string{"report", "backup", "y-1fed9dcc"}, []string{c.Jobs[0].Name, c.Jobs[1].Name, c.Jobs[2].Name})
	assert.Equal(t, filepath.Join(dir, "c.yaml"), c.Jobs[0].File)
	assert.Equal(t, crontab, c.Jobs[1].File)
	// A problem the daemon finds later names the crontab's line, not a jobs[i].
	assert.Equal(t, crontab+":3: lock_ttl: no", c.JobError(2, &job.InvalidError{Field: "Options.LockTTL", Problem: "no"}).Error())
	assert.Equal(t, filepath.Join(dir, "c.yaml")+":2: jobs[0].lock_ttl: no", c.JobError(0, &job.InvalidError{Field: "Options.LockTTL", Problem: "no"}).Error())

	_, err = config.Load(write("nodes: [a:1]\njobs: [{name: backup, schedule: '@hourly', command: [r]}]\ncrontab: jobs.crontab\n"))
	require.Error(t, err)
	assert.Equal(t, crontab+`:2: name: "backup" is already the name of jobs[0] (`+filepath.Join(dir, "c.yaml")+`:2): give each job its own name, with a # cronlock: name=… comment above the line`, err.Error())

	_, err = config.Load(write("nodes: [a:1]\ncrontab: missing\n"))
	require.Error(t, err)
	assert.Equal(t, filepath.Join(dir, "c.yaml")+":2: crontab: open "+filepath.Join(dir, "missing")+": no such file or directory: give the path of a crontab file that this user can read (relative paths are from the config file's directory)", err.Error())

	// The crontab's variables are the env: of its jobs, under the same rules: a job is given
	// no secret of the daemon's.
	require.NoError(t, os.WriteFile(crontab, []byte("PW_env=REDIS_PW\n@hourly x\n"), 0o600))
	_, err = config.Load(write("nodes: [{addr: 'a:1', password_env: REDIS_PW}]\ncrontab: jobs.crontab\n"))
	require.Error(t, err)
	assert.Equal(t, crontab+":1: env.PW_env: REDIS_PW holds the password of nodes[0] (password_env), which no job is given: give the job a credential of its own in another variable", err.Error())
}

// The crontab runs commands as the daemon, as the config does: it gets the config's check.
func TestCrontabUntrusted(t *testing.T) {
	path := writeCrontab(t, "@hourly x\n")
	crontab := filepath.Join(filepath.Dir(path), "crontab")
	require.NoError(t, os.Chmod(crontab, 0o664))
	_, err := config.Load(path)
	require.ErrorIs(t, err, config.ErrUntrusted)
	assert.Equal(t, crontab+": config: not safe to trust: group or others can write it (mode 0664), and whoever writes the config runs commands as this daemon: chmod go-w "+crontab, err.Error())
	_, err = config.Load(path, config.Insecure())
	require.NoError(t, err)
}

// ImportCrontab prints the YAML jobs: of a crontab; a config with them has the same jobs.
func TestImportCrontab(t *testing.T) {
	path := writeCrontab(t, exampleCrontab)
	want, err := config.Load(path)
	require.NoError(t, err)
	out, err := config.ImportCrontab("crontab", []byte(exampleCrontab))
	require.NoError(t, err)
	assert.Contains(t, string(out), "  - # crontab line 6\n    name: greet\n    schedule: CRON_TZ=Europe/Paris */5 * * * *\n")
	got, err := config.Parse("c.yaml", append([]byte("nodes: [a:1]\n"), out...))
	require.NoError(t, err, "%s", out)
	assert.Equal(t, viewOf(t, want.Jobs), viewOf(t, got.Jobs))

	_, err = config.ImportCrontab("crontab", []byte("@reboot x\n"))
	require.ErrorContains(t, err, "crontab:1: schedule: @reboot")
	_, err = config.ImportCrontab("crontab", []byte("# none\n"))
	require.EqualError(t, err, `crontab: has no job lines: give at least one, e.g. "*/5 * * * * /usr/local/bin/report"`)
}
