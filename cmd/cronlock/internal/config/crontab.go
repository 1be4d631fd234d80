package config

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/scheduler"
)

// A crontab (the config's crontab: key) is read with crontab(5)'s rules, into the same jobs
// that jobs: gives: each job line becomes the YAML job it is equivalent to (name:, schedule:,
// command:, env: and the options of its "# cronlock:" comment), which the YAML's own job
// parser then checks and decodes. So a crontab job is refused or accepted exactly as the YAML
// job that ImportCrontab prints for it.

// defaultShell runs a crontab's commands when no SHELL= line is given, as in cron.
const defaultShell = "/bin/sh"

// crontabOptionKeys are the job keys a "# cronlock:" comment may give: those of a YAML job
// except the ones the line itself gives.
func crontabOptionKeys() []string {
	return slices.DeleteFunc(slices.Clone(jobKeys), func(k string) bool {
		return k == "schedule" || k == "command" || k == "env"
	})
}

// crontabEnvLine matches a NAME=value line: the name may be quoted, and spaces may stand
// around "=".
var crontabEnvLine = regexp.MustCompile(`^("[^"]*"|'[^']*'|[^\s="']+)\s*=\s*(.*)$`)

// crontabOptionPrefix starts the comment that gives a job line its options.
var crontabOptionPrefix = regexp.MustCompile(`^#\s*cronlock:`)

// crontabVar is one NAME=value line in effect.
type crontabVar struct {
	name, value string
	line        int
}

// crontabOption is one key=value of a "# cronlock:" comment.
type crontabOption struct {
	key, value string
	quoted     bool
	line       int
}

// crontab reads crontab(5) text; its parser names the crontab's file in every problem.
type crontab struct {
	p           *parser
	maxTTL      time.Duration
	maxTTLOK    bool
	minInterval time.Duration

	vars    []crontabVar // the NAME=value lines in effect, in the order first given
	cronTZ  string       // CRON_TZ in effect ("" for none)
	tz      string       // TZ in effect ("" for none)
	shell   string
	options []crontabOption // of the "# cronlock:" comments above the current line
	optLine int             // the first of those comments (0: none)
	names   map[string]int  // job name → line

	jobs  []Job
	items []*yaml.Node // each job as its YAML mapping
}

// readCrontab reads the crontab that the crontab: key e names: a path relative to the config
// file's directory, trusted as the config file must be. It returns its jobs (nil when there
// is a problem, reported) and the path opened.
func (p *parser) readCrontab(e entry, maxTTL time.Duration, maxTTLOK bool, minInterval time.Duration) ([]Job, string) {
	name, ok := p.str(e, "crontab")
	if !ok {
		return nil, ""
	}
	if name == "" {
		p.fail(e.val.Line, "crontab", "is empty: give the path of a crontab file, e.g. /etc/cronlock/crontab (relative paths are from the config file's directory)")
		return nil, ""
	}
	path := name
	if !filepath.IsAbs(path) {
		path = filepath.Join(filepath.Dir(p.file), path)
	}
	data, err := readFile(path, p.opts)
	if errors.Is(err, ErrUntrusted) {
		p.errs = append(p.errs, err) // kept whole, so that errors.Is finds it
		return nil, path
	}
	if err != nil {
		p.fail(e.val.Line, "crontab", "%v: give the path of a crontab file that this user can read (relative paths are from the config file's directory)", err)
		return nil, path
	}
	cp := &parser{file: path, src: data}
	jobs, _ := cp.crontab(data, maxTTL, maxTTLOK, minInterval)
	p.absorb(cp)
	if len(jobs) == 0 && cp.count() == 0 {
		p.fail(e.val.Line, "crontab", "%s has no job lines: give at least one (e.g. \"*/5 * * * * /usr/local/bin/report\"), or leave crontab: out", path)
	}
	return jobs, path
}

// crontabNames returns the crontab's jobs without those named as a job of jobs: (reported).
func (p *parser) crontabNames(yamlJobs, jobs []Job) []Job {
	return slices.DeleteFunc(jobs, func(j Job) bool {
		k := slices.IndexFunc(yamlJobs, func(y Job) bool { return y.Name == j.Name })
		if k >= 0 {
			p.failIn(j.File, j.Line, "name", "%q is already the name of jobs[%d] (%s:%d): give each job its own name, with a # cronlock: name=… comment above the line", j.Name, k, yamlJobs[k].File, yamlJobs[k].Line)
		}
		return k >= 0
	})
}

// absorb takes the problems of q, the parser of another file.
func (p *parser) absorb(q *parser) {
	for _, err := range q.errs {
		if len(p.errs) >= maxErrors {
			p.more++
			continue
		}
		p.errs = append(p.errs, err)
	}
	p.more += q.more
}

// crontab parses crontab text into its jobs and, for each, the YAML job it is equivalent to.
// Problems are reported with the line; a job with a problem is left out.
func (p *parser) crontab(data []byte, maxTTL time.Duration, maxTTLOK bool, minInterval time.Duration) ([]Job, []*yaml.Node) {
	c := &crontab{p: p, maxTTL: maxTTL, maxTTLOK: maxTTLOK, minInterval: minInterval, shell: defaultShell, names: map[string]int{}}
	for i, raw := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		line := i + 1
		text := strings.TrimSpace(strings.TrimSuffix(raw, "\r"))
		switch {
		case !utf8.ValidString(text):
			c.p.fail(line, "", "is not valid UTF-8: save the crontab as UTF-8")
		case crontabOptionPrefix.MatchString(text):
			c.optionComment(line, crontabOptionPrefix.ReplaceAllString(text, ""))
		case strings.HasPrefix(text, "#"):
			// A comment; the options above, if any, still go to the next job line.
		case text == "":
			c.orphanOptions("a blank line")
		default:
			if m := crontabEnvLine.FindStringSubmatch(text); m != nil {
				c.orphanOptions("a NAME=value line")
				c.variable(line, unquote(m[1]), unquote(strings.TrimSpace(m[2])))
			} else {
				c.jobLine(line, text)
			}
		}
	}
	c.orphanOptions("the end of the file")
	for _, err := range p.errs {
		// The YAML job parser names fields from a path; a crontab job has none.
		if e, ok := err.(*Error); ok {
			e.Field = strings.TrimPrefix(e.Field, ".")
		}
	}
	return c.jobs, c.items
}

// unquote drops the quotes around s, if it has a matching pair.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// orphanOptions reports the "# cronlock:" comments that what, which is no job line, follows.
func (c *crontab) orphanOptions(what string) {
	if c.optLine == 0 {
		return
	}
	c.p.fail(c.optLine, "", "this # cronlock: comment is followed by %s, not by a job line: put it directly above the line of the job it configures", what)
	c.options, c.optLine = nil, 0
}

// optionComment parses the key=value pairs of a "# cronlock:" comment.
func (c *crontab) optionComment(line int, s string) {
	if c.optLine == 0 {
		c.optLine = line
	}
	known := crontabOptionKeys()
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		word := s[:wordEnd(s)]
		key, value, ok := strings.Cut(word, "=")
		if !ok || key == "" {
			c.p.fail(line, "", "%q is not key=value: write the options as e.g. # cronlock: name=backup timeout=10m", word)
			return
		}
		quoted := value != "" && (value[0] == '"' || value[0] == '\'')
		rest := s[len(key)+1:]
		if quoted {
			end := strings.IndexByte(rest[1:], rest[0])
			if end < 0 {
				c.p.fail(line, key, "the quote %s opened is not closed: close it on the same line", rest[:1])
				return
			}
			value, rest = rest[1:end+1], rest[end+2:]
		} else {
			rest = rest[len(value):]
		}
		s = rest
		switch {
		case !slices.Contains(known, key):
			c.p.fail(line, key, "unknown key%s (known: %s)", suggest(key, known), strings.Join(known, ", "))
		case value == "" && !quoted:
			c.p.fail(line, key, "has no value: write %s=VALUE, without spaces around = (quote a value with spaces)", key)
		case slices.ContainsFunc(c.options, func(o crontabOption) bool { return o.key == key }):
			c.p.fail(line, key, "given twice for the same job line: keep one")
		default:
			c.options = append(c.options, crontabOption{key: key, value: value, quoted: quoted, line: line})
		}
	}
}

// wordEnd returns the index where the first word of s (no leading space) ends.
func wordEnd(s string) int {
	if i := strings.IndexAny(s, " \t"); i >= 0 {
		return i
	}
	return len(s)
}

// variable applies a NAME=value line to the job lines below it.
func (c *crontab) variable(line int, name, value string) {
	if !envName.MatchString(name) {
		c.p.fail(line, "", "%q is not a variable name (letters, digits and _): a NAME=value line sets a variable for the job lines below it", name)
		return
	}
	switch name {
	case "CRON_TZ", "TZ":
		if value != "" {
			if _, err := time.LoadLocation(value); err != nil {
				c.p.fail(line, name, "%q is not a time zone this host knows (%v): use an IANA name such as Europe/Paris or UTC", value, err)
				return
			}
		}
		if name == "CRON_TZ" {
			c.cronTZ = value
			return // the schedules' zone, not the commands'
		}
		c.tz = value
	case "MAILTO":
		if value != "" {
			c.p.fail(line, name, "cronlock does not mail a job's output: it logs it (see output_level and output_limit); remove the line, or write MAILTO=\"\"")
		}
		return
	case "SHELL":
		if value == "" {
			c.p.fail(line, name, "is empty: give the shell that runs the commands below, e.g. SHELL=/bin/bash, or leave it out for /bin/sh")
			return
		}
		c.shell = value
	}
	for i, v := range c.vars {
		if v.name == name {
			c.vars[i] = crontabVar{name: name, value: value, line: line}
			return
		}
	}
	c.vars = append(c.vars, crontabVar{name: name, value: value, line: line})
}

// jobLine parses a job line: its schedule (a descriptor, or 5 fields, or 6 with seconds
// first), then its command.
func (c *crontab) jobLine(line int, text string) {
	options := c.options
	c.options, c.optLine = nil, 0
	words := strings.Fields(text)
	var n int // words of the schedule
	switch {
	case words[0] == "@reboot":
		c.p.fail(line, "schedule", "@reboot runs a command when a host boots, and a host's boot is no tick that one host of the cluster takes: run it from the host's own init system (e.g. a systemd unit), or give the line a schedule")
		return
	case words[0] == "@every":
		n = 2
	case strings.HasPrefix(words[0], "@"):
		n = 1
	case len(words) >= 7 && (secondsLine(words) || fieldLike.MatchString(words[5])):
		n = 6
	default:
		n = 5
	}
	if len(words) <= n {
		c.p.fail(line, "", "has %d words, and no command after the schedule: a job line is 5 schedule fields (minute hour day-of-month month day-of-week), or 6 with seconds first, or a descriptor such as @hourly, then the command", len(words))
		return
	}
	spec := strings.Join(words[:n], " ")
	command := text
	for range n {
		command = strings.TrimLeft(command[wordEnd(command):], " \t")
	}
	if first := command[:wordEnd(command)]; isUserName(first) {
		c.p.fail(line, "", "%q before the command is a user of this host, not a program: a user field, as in a system crontab (/etc/crontab, /etc/cron.d); cronlock runs every command as its own user: remove the user name (and run cronlock as that user)", first)
		return
	}
	script, stdin, hasStdin := splitPercent(command)
	if strings.TrimSpace(script) == "" {
		c.p.fail(line, "command", "is empty before the %% that starts its input: give the command to run")
		return
	}
	shellLine := script
	if hasStdin {
		shellLine = "printf %s " + shellQuote(stdin) + " | {\n" + script + "\n}"
	}
	schedule := spec
	if zone := cmp.Or(c.cronTZ, c.tz); zone != "" {
		schedule = "CRON_TZ=" + zone + " " + spec
	}

	item := &yaml.Node{Kind: yaml.MappingNode, Line: line}
	add := func(key string, val *yaml.Node) {
		item.Content = append(item.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key, Line: val.Line}, val)
	}
	str := func(s string, line int) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Line: line}
	}
	name := str(derivedName(schedule, script, command), line)
	if i := slices.IndexFunc(options, func(o crontabOption) bool { return o.key == "name" }); i >= 0 {
		name = str(options[i].value, options[i].line)
	}
	add("name", name)
	add("schedule", str(schedule, line))
	add("command", &yaml.Node{Kind: yaml.SequenceNode, Line: line, Content: []*yaml.Node{str(c.shell, line), str("-c", line), str(shellLine, line)}})
	for _, o := range options {
		if o.key == "name" {
			continue
		}
		v := &yaml.Node{Kind: yaml.ScalarNode, Value: o.value, Line: o.line}
		if o.quoted {
			v.Tag, v.Style = "!!str", yaml.DoubleQuotedStyle
		}
		add(o.key, v)
	}
	if len(c.vars) > 0 {
		env := &yaml.Node{Kind: yaml.MappingNode, Line: c.vars[0].line}
		for _, v := range c.vars {
			env.Content = append(env.Content, str(v.name, v.line), str(v.value, v.line))
		}
		add("env", env)
	}
	item.Content[0].HeadComment = fmt.Sprintf("crontab line %d", line)

	j, ok := c.p.job(item, "", c.maxTTL, c.maxTTLOK, c.minInterval)
	if !ok {
		return
	}
	j.fromCrontab = true
	for i := range j.Env {
		j.Env[i].path = strings.TrimPrefix(j.Env[i].path, ".")
	}
	if first, dup := c.names[j.Name]; dup {
		why := "give each job line its own name"
		if name.Line == line {
			why = "the two lines have the same schedule and command, so the same derived name: remove one, or name them apart"
		}
		c.p.fail(name.Line, "name", "%q is already the name of the job on line %d: %s, with a # cronlock: name=… comment above the line", j.Name, first, why)
		return
	}
	c.names[j.Name] = line
	c.jobs = append(c.jobs, j)
	c.items = append(c.items, item)
}

// fieldLike matches a word that can only be a schedule field (no letters but H, as in
// H(0-7)): the sixth word of a line with seconds, which would be a strange start of a command.
var fieldLike = regexp.MustCompile(`^[0-9*?/,H()-]+$`)

// secondsLine reports whether the first six words of a job line are a schedule with seconds
// (with any H resolved, under any name: the name does not change whether it parses).
func secondsLine(words []string) bool {
	spec, err := schedseam.ResolveSpec(strings.Join(words[:6], " "), "")
	if err == nil {
		_, err = scheduler.ParseSpec(spec, nil)
	}
	return err == nil
}

// isUserName reports whether word, the first word of a command, is the name of a user of
// this host and not a program on $PATH: the user field of a system crontab, since such a
// command could not run.
func isUserName(word string) bool {
	if strings.ContainsAny(word, `/=$'"\`) {
		return false
	}
	if _, err := user.Lookup(word); err != nil {
		return false
	}
	_, err := exec.LookPath(word)
	return err != nil
}

// splitPercent applies crontab(5)'s % rule to a command: the first % not escaped as \% ends
// the command, the text after it is the command's standard input, and every other % in it is
// a newline; \% is a %.
func splitPercent(s string) (command, stdin string, hasStdin bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s) && s[i+1] == '%':
			b.WriteByte('%')
			i++
		case s[i] == '%' && !hasStdin:
			command, hasStdin = b.String(), true
			b.Reset()
		case s[i] == '%':
			b.WriteByte('\n')
		default:
			b.WriteByte(s[i])
		}
	}
	if !hasStdin {
		return b.String(), "", false
	}
	return command, b.String(), true
}

// shellQuote quotes s as one word for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// nameSlug keeps the words of a derived name.
var nameSlug = regexp.MustCompile(`[^a-z0-9]+`)

// maxSlug bounds the readable part of a derived name.
const maxSlug = 40

// derivedName names a job line that has no name= option: a slug of its command before any %
// (the program's base name and the words after it, lower case, every run of other characters
// a "-", at most 40 bytes) and 8 hex digits of the SHA-256 of its schedule and whole command.
// The same line gives the same name on every host, and a line whose schedule or command
// changes is another job.
func derivedName(schedule, script, command string) string {
	words := strings.Fields(script)
	words[0] = filepath.Base(words[0])
	slug := strings.Trim(nameSlug.ReplaceAllString(strings.ToLower(strings.Join(words, " ")), "-"), "-")
	if len(slug) > maxSlug {
		slug = slug[:maxSlug]
		if i := strings.LastIndexByte(slug, '-'); i > 0 {
			slug = slug[:i]
		}
		slug = strings.TrimRight(slug, "-")
	}
	if slug == "" {
		slug = "job"
	}
	sum := sha256.Sum256([]byte(schedule + "\n" + command))
	return slug + "-" + hex.EncodeToString(sum[:4])
}

// ImportCrontab returns the YAML jobs: that are equivalent to the crontab data (name is the
// file's name in messages), checked with the default max_ttl and min_interval; or an error
// listing every problem, each an *Error naming the crontab's line.
func ImportCrontab(name string, data []byte) ([]byte, error) {
	p := &parser{file: name, src: data}
	_, items := p.crontab(data, DefaultMaxTTL, true, DefaultMinInterval)
	if err := p.err(); err != nil {
		return nil, err
	}
	if len(items) == 0 {
		return nil, &Error{File: name, Problem: "has no job lines: give at least one, e.g. \"*/5 * * * * /usr/local/bin/report\""}
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
		{Kind: yaml.ScalarNode, Value: "jobs", HeadComment: "The jobs of " + name + ", for the jobs: of a cronlock config (in place of its crontab: key)."},
		{Kind: yaml.SequenceNode, Content: items},
	}}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, err
	}
	return b.Bytes(), enc.Close()
}
