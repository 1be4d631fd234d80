package config

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/robfig/cron/v3"
	"go.yaml.in/yaml/v3"

	"github.com/cronlock/cronlock/internal/jobseam"
	"github.com/cronlock/cronlock/internal/scheddefault"
	"github.com/cronlock/cronlock/internal/schedseam"
	"github.com/cronlock/cronlock/internal/tickmath"
	"github.com/cronlock/cronlock/job"
	"github.com/cronlock/cronlock/scheduler"
)

// maxErrors bounds the problems reported for one file; the rest are counted.
const maxErrors = 20

// maxExpansions bounds how many aliases and merge keys are followed in one file, so that a
// file of nested aliases cannot make parsing take exponential time.
const maxExpansions = 10000

// Load reads the file at path and parses it (see Parse). It refuses, with an error matching
// ErrUntrusted, a file that group or others can write, or that another user than root and this
// process's owns, unless the option Insecure is given; the same for the crontab it names.
func Load(path string, opts ...LoadOption) (*Config, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	data, err := readFile(path, o)
	if err != nil {
		return nil, err
	}
	return parse(path, data, o)
}

// readFile reads the file at path, refusing one that is not trusted (checkTrusted) unless o
// is insecure.
func readFile(path string, o loadOptions) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat() // of the file read, not of what the path names a moment later
	if err != nil {
		return nil, err
	}
	if !o.insecure {
		if err := checkTrusted(path, fi); err != nil {
			return nil, err
		}
	}
	return io.ReadAll(f)
}

// Parse parses the content of a config file; name is the file's name in messages, and the
// directory that a relative crontab: path is in. It reads the crontab a crontab: key names, as
// Load does, with opts. It returns the config with defaults applied, or an error listing every
// problem found (up to a limit), one per line; each is an *Error, reachable with errors.As.
func Parse(name string, data []byte, opts ...LoadOption) (*Config, error) {
	var o loadOptions
	for _, opt := range opts {
		opt(&o)
	}
	return parse(name, data, o)
}

func parse(name string, data []byte, o loadOptions) (*Config, error) {
	p := &parser{file: name, src: data, opts: o}
	root := p.document(data)
	if root == nil {
		return nil, p.err()
	}
	c := p.config(root)
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// FromNodes returns the config of the standalone Redis servers at addrs (host:port, no
// password, no TLS), every other key at its default: what a file of only nodes: gives with
// NodesOnly. name names it in messages, e.g. "--nodes". Its problems are *Errors, as Parse's.
func FromNodes(name string, addrs []string) (*Config, error) {
	str := func(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s} }
	seq := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, a := range addrs {
		seq.Content = append(seq.Content, str(a))
	}
	p := &parser{file: name, opts: loadOptions{nodesOnly: true}}
	c := p.config(&yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{str("nodes"), seq}})
	if err := p.err(); err != nil {
		return nil, err
	}
	return c, nil
}

type parser struct {
	file   string
	src    []byte
	opts   loadOptions // how a crontab the file names is read
	errs   []error
	more   int // problems past maxErrors
	steps  int // aliases and merges followed
	bombed bool
}

// fail records a problem at line in field.
func (p *parser) fail(line int, field, format string, args ...any) {
	p.failIn(p.file, line, field, format, args...)
}

// failIn records a problem at line in field of file, the config file or its crontab.
func (p *parser) failIn(file string, line int, field, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.more++
		return
	}
	p.errs = append(p.errs, &Error{File: file, Line: line, Field: field, Problem: fmt.Sprintf(format, args...)})
}

func (p *parser) count() int { return len(p.errs) + p.more }

func (p *parser) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	errs := p.errs
	if p.more > 0 {
		errs = append(slices.Clone(errs), &Error{File: p.file, Problem: fmt.Sprintf("and %d more problems", p.more)})
	}
	return errors.Join(errs...)
}

var syntaxLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// document decodes the one YAML document of data and returns its top-level node, or nil after
// reporting why there is none.
func (p *parser) document(data []byte) *yaml.Node {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.fail(0, "", "is empty: give at least nodes: and jobs: (see docs/cli.md)")
		} else {
			p.syntax(err)
		}
		return nil
	}
	var extra yaml.Node
	switch err := dec.Decode(&extra); {
	case err == nil:
		p.fail(extra.Line, "", "a second YAML document starts here: put the whole config in one document (remove the --- line)")
		return nil
	case !errors.Is(err, io.EOF):
		p.syntax(err)
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		p.fail(0, "", "is empty: give at least nodes: and jobs: (see docs/cli.md)")
		return nil
	}
	root := p.resolve(doc.Content[0])
	if root == nil {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		if isNull(root) {
			p.fail(0, "", "is empty: give at least nodes: and jobs: (see docs/cli.md)")
		} else {
			p.fail(root.Line, "", "the top level must be a mapping of keys (nodes:, jobs:, …), not %s", kindName(root))
		}
		return nil
	}
	return root
}

// syntax reports a YAML syntax error, with the line when the parser gave one, and a hint when
// the line has a value that YAML reads as something else than a string.
func (p *parser) syntax(err error) {
	msg := err.Error()
	m := syntaxLine.FindStringSubmatch(msg)
	if m == nil {
		p.fail(0, "", "not valid YAML: %s", strings.TrimPrefix(msg, "yaml: "))
		return
	}
	line, _ := strconv.Atoi(m[1])
	p.fail(line, "", "not valid YAML: %s%s", m[2], p.quoteHint(line))
}

// quoteHint suggests quoting when the value on line (or the line before, where YAML often
// notices the problem late) starts with a character that YAML reserves.
func (p *parser) quoteHint(line int) string {
	lines := strings.Split(string(p.src), "\n")
	for _, l := range []int{line, line - 1} {
		if l < 1 || l > len(lines) {
			continue
		}
		text := strings.TrimSpace(lines[l-1])
		text = strings.TrimSpace(strings.TrimPrefix(text, "- "))
		if i := strings.Index(text, ": "); i >= 0 {
			text = strings.TrimSpace(text[i+2:])
		}
		if text != "" && strings.ContainsRune("*&!@%`", rune(text[0])) {
			example := `"*/5 * * * *"`
			if text[0] == '@' {
				example = `"@every 10s"`
			}
			return fmt.Sprintf(` (line %d: a value that starts with %q must be quoted, e.g. schedule: %s)`, l, text[:1], example)
		}
	}
	return ""
}

// resolve follows aliases; it returns nil after reporting a file that expands too much.
func (p *parser) resolve(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		if !p.expand(n.Line) {
			return nil
		}
		n = n.Alias
	}
	return n
}

// expand counts one alias or merge followed; false once there were too many.
func (p *parser) expand(line int) bool {
	p.steps++
	if p.steps <= maxExpansions {
		return true
	}
	if !p.bombed {
		p.bombed = true
		p.fail(line, "", "aliases expand to more than %d nodes: use fewer nested aliases", maxExpansions)
	}
	return false
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// kindName names what a node is, for messages.
func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "null"
		case "!!bool":
			return fmt.Sprintf("the boolean %s", n.Value)
		case "!!int", "!!float":
			return fmt.Sprintf("the number %s", n.Value)
		}
		return fmt.Sprintf("the string %q", n.Value)
	}
	return "a document"
}

// entry is one key of a mapping and its value (aliases resolved).
type entry struct {
	key, val *yaml.Node
}

// mapping returns the keys of the mapping n at path whose values are not null, with merge keys
// ("<<") expanded — explicit keys win over merged ones, earlier merges over later ones. It
// reports keys given twice, non-string keys and keys not in known (except, when extensions
// is set, keys starting with "x-", which hold anchors).
func (p *parser) mapping(n *yaml.Node, path string, known []string, extensions bool) map[string]entry {
	out := map[string]entry{}
	seen := map[string]int{}
	var merges []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merges = append(merges, v)
			continue
		}
		k = p.resolve(k)
		if k == nil {
			return out
		}
		if k.Kind != yaml.ScalarNode || isNull(k) {
			p.fail(k.Line, path, "a key must be a plain name, not %s", kindName(k))
			continue
		}
		name := k.Value
		if first, dup := seen[name]; dup {
			p.fail(k.Line, join(path, name), "given twice (first on line %d): keep one", first)
			continue
		}
		seen[name] = k.Line
		if !slices.Contains(known, name) {
			if !(extensions && strings.HasPrefix(name, "x-")) {
				p.fail(k.Line, join(path, name), "unknown key%s (known: %s)", suggest(name, known), strings.Join(known, ", "))
			}
			continue
		}
		v = p.resolve(v)
		if v == nil {
			return out
		}
		if !isNull(v) {
			out[name] = entry{key: k, val: v}
		}
	}
	for _, m := range merges {
		if !p.expand(m.Line) {
			return out
		}
		src := p.resolve(m)
		if src == nil {
			return out
		}
		var srcs []*yaml.Node
		switch src.Kind {
		case yaml.MappingNode:
			srcs = []*yaml.Node{src}
		case yaml.SequenceNode:
			for _, s := range src.Content {
				if s = p.resolve(s); s == nil {
					return out
				}
				srcs = append(srcs, s)
			}
		default:
			srcs = []*yaml.Node{src}
		}
		for _, s := range srcs {
			if s.Kind != yaml.MappingNode {
				p.fail(s.Line, path, "a merge key (<<) takes a mapping or a list of mappings, not %s", kindName(s))
				continue
			}
			for name, e := range p.mapping(s, path, known, extensions) {
				if _, ok := out[name]; !ok && seen[name] == 0 {
					out[name] = e
				}
			}
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest returns `: did you mean "x"?` for the known key closest to name, if one is close.
func suggest(name string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := distance(strings.ToLower(name), k); d < bestD {
			best, bestD = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(`: did you mean %q?`, best)
}

// distance is the Levenshtein distance between a and b (bytes).
func distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// str returns the value of a scalar; a mapping or a list is reported.
func (p *parser) str(e entry, path string) (string, bool) {
	if e.val.Kind != yaml.ScalarNode {
		p.fail(e.val.Line, path, "must be a string, not %s", kindName(e.val))
		return "", false
	}
	return e.val.Value, true
}

// duration parses a Go duration.
func (p *parser) duration(e entry, path string) (time.Duration, bool) {
	if e.val.Kind != yaml.ScalarNode {
		p.fail(e.val.Line, path, "must be a duration (e.g. 10m, 90s), not %s", kindName(e.val))
		return 0, false
	}
	s := strings.TrimSpace(e.val.Value)
	d, err := time.ParseDuration(s)
	if err != nil {
		if _, nerr := strconv.ParseFloat(s, 64); nerr == nil && s != "0" {
			p.fail(e.val.Line, path, "%s is not a duration: give a unit, e.g. %ss or %sm", s, s, s)
		} else {
			p.fail(e.val.Line, path, "%q is not a duration (e.g. 10m, 90s)", e.val.Value)
		}
		return 0, false
	}
	return d, true
}

// boolean parses true or false.
func (p *parser) boolean(e entry, path string) (bool, bool) {
	if e.val.Kind == yaml.ScalarNode && e.val.ShortTag() == "!!bool" {
		var b bool
		if err := e.val.Decode(&b); err == nil {
			return b, true
		}
	}
	p.fail(e.val.Line, path, "must be true or false (unquoted), not %s", kindName(e.val))
	return false, false
}

// integer parses a whole number.
func (p *parser) integer(e entry, path string) (int, bool) {
	if e.val.Kind == yaml.ScalarNode && e.val.ShortTag() == "!!int" {
		var i int
		if err := e.val.Decode(&i); err == nil {
			return i, true
		}
		p.fail(e.val.Line, path, "%s is out of range", e.val.Value)
		return 0, false
	}
	p.fail(e.val.Line, path, "must be a whole number, not %s", kindName(e.val))
	return 0, false
}

// env parses a job's env: a mapping of variable names to values, where NAME_env: VAR takes
// NAME's value from the daemon's variable VAR.
func (p *parser) env(e entry, path string) []EnvVar {
	if e.val.Kind != yaml.MappingNode {
		p.fail(e.val.Line, path, "must be a mapping of variable names to values, e.g. {REPORT_DIR: /var/reports, DB_PASSWORD_env: BACKUP_DB_PASSWORD}; not %s", kindName(e.val))
		return nil
	}
	var out []EnvVar
	seen := map[string]int{}
	for i := 0; i+1 < len(e.val.Content); i += 2 {
		k, v := p.resolve(e.val.Content[i]), p.resolve(e.val.Content[i+1])
		if k == nil || v == nil {
			return nil
		}
		key := join(path, k.Value)
		if k.Kind != yaml.ScalarNode || v.Kind != yaml.ScalarNode || isNull(v) {
			p.fail(k.Line, key, "must be a variable name with a value (a string), not %s: %s", kindName(k), kindName(v))
			continue
		}
		ev := EnvVar{Value: v.Value, file: p.file, line: v.Line, path: key}
		ev.Name, ev.fromEnv = k.Value, false
		if name, ok := strings.CutSuffix(k.Value, "_env"); ok {
			ev.Name, ev.fromEnv = name, true
		}
		switch {
		case ev.Name == "" || strings.ContainsAny(ev.Name, "=\x00") || strings.IndexFunc(ev.Name, unicode.IsSpace) >= 0:
			p.fail(k.Line, key, "%q is not a variable name: use letters, digits and _", ev.Name)
		case strings.HasPrefix(ev.Name, "CRONLOCK_"):
			p.fail(k.Line, key, "%s is set by cronlock for each run: give another name", ev.Name)
		case ev.fromEnv && ev.Value == "":
			p.fail(v.Line, key, "is empty: give the name of the daemon's variable to take %s from", ev.Name)
		case strings.ContainsRune(ev.Value, 0):
			p.fail(v.Line, key, "has a NUL byte, which no environment variable can hold")
		default:
			if first, dup := seen[ev.Name]; dup {
				p.fail(k.Line, key, "%s is given twice (first on line %d): keep one", ev.Name, first)
				continue
			}
			seen[ev.Name] = k.Line
			out = append(out, ev)
		}
	}
	return out
}

// size parses a count of bytes: a whole number, or one with a unit B, KiB or MiB (e.g. 64KiB).
func (p *parser) size(e entry, path string) (int64, bool) {
	if e.val.Kind == yaml.ScalarNode && e.val.ShortTag() == "!!int" {
		n, ok := p.integer(e, path)
		if ok && n < 0 {
			p.fail(e.val.Line, path, "%d is negative: give a count of bytes, e.g. 64KiB (0: none)", n)
			return 0, false
		}
		return int64(n), ok
	}
	v := strings.TrimSpace(e.val.Value)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"B", 1}} {
		if num, ok := strings.CutSuffix(v, u.suffix); ok && e.val.Kind == yaml.ScalarNode {
			if n, err := strconv.ParseInt(strings.TrimSpace(num), 10, 32); err == nil && n >= 0 {
				return n * u.mult, true
			}
			break
		}
	}
	p.fail(e.val.Line, path, "%q is not a size: give a count of bytes, e.g. 65536, 64KiB or 1MiB", v)
	return 0, false
}

var topKeys = []string{"nodes", "allow_even_nodes", "prefix", "replica", "http", "http_token_env", "tracing", "kill_grace", "boot_key", "max_ttl", "wait_for_replicas", "min_interval", "jobs", "crontab"}

func (p *parser) config(root *yaml.Node) *Config {
	c := &Config{
		File:        p.file,
		Prefix:      DefaultPrefix,
		BootKey:     DefaultBootKey,
		MaxTTL:      DefaultMaxTTL,
		KillGrace:   DefaultKillGrace,
		MinInterval: DefaultMinInterval,
		Tracing:     Tracing{ServiceName: DefaultServiceName},
	}
	m := p.mapping(root, "", topKeys, true)
	killGraceLine := 0
	if e, ok := m["allow_even_nodes"]; ok {
		c.AllowEvenNodes, _ = p.boolean(e, "allow_even_nodes")
	}
	if e, ok := m["prefix"]; ok {
		if s, ok := p.str(e, "prefix"); ok {
			if s == "" || strings.ContainsAny(s, "{}") || strings.IndexFunc(s, unicode.IsSpace) >= 0 {
				p.fail(e.val.Line, "prefix", "%q: give a non-empty prefix without braces or spaces, e.g. %q", s, DefaultPrefix)
			} else {
				c.Prefix = s
			}
		}
	}
	if e, ok := m["replica"]; ok {
		if s, ok := p.str(e, "replica"); ok {
			if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
				p.fail(e.val.Line, "replica", "%q has characters that cannot be printed: use letters, digits and punctuation", s)
			}
			c.Replica = s
		}
	}
	if e, ok := m["http"]; ok {
		if s, ok := p.str(e, "http"); ok && s != "" {
			if err := checkHostPort(s, true); err != nil {
				p.fail(e.val.Line, "http", "%q: %v, e.g. 127.0.0.1:9464 (or \"\" for no HTTP server)", s, err)
			}
			c.HTTP = ListenAddr(s)
		}
	}
	if e, ok := m["http_token_env"]; ok {
		if s, ok := p.str(e, "http_token_env"); ok {
			if s == "" || strings.ContainsAny(s, "= \t") {
				p.fail(e.val.Line, "http_token_env", "%q: give the name of the environment variable that holds the bearer token, e.g. CRONLOCK_HTTP_TOKEN", s)
			}
			c.HTTPTokenEnv, c.httpTokenEnvLine = s, e.val.Line
		}
	}
	if e, ok := m["tracing"]; ok {
		p.tracing(e, &c.Tracing)
	}
	if e, ok := m["kill_grace"]; ok {
		if d, ok := p.duration(e, "kill_grace"); ok {
			if d < 0 {
				p.fail(e.val.Line, "kill_grace", "%v is negative: give how long a job's processes have between SIGTERM and SIGKILL, e.g. 10s (0: SIGKILL at once)", d)
			}
			c.KillGrace, c.KillGraceGiven = d, true
			killGraceLine = e.val.Line
		}
	}
	bootKeyLine := 0
	if e, ok := m["boot_key"]; ok {
		bootKeyLine = e.val.Line
		if s, ok := p.str(e, "boot_key"); ok {
			if s == "" {
				p.fail(e.val.Line, "boot_key", "is empty: give a key name, or leave it out for %q", DefaultBootKey)
			} else {
				c.BootKey = s
			}
		}
	}
	maxTTLOK := true
	if e, ok := m["max_ttl"]; ok {
		d, ok := p.duration(e, "max_ttl")
		switch {
		case !ok:
			maxTTLOK = false
		case d <= 0:
			maxTTLOK = false
			p.fail(e.val.Line, "max_ttl", "%v: must be positive, e.g. 1m (the longest lock TTL, and how long a node that lost its memory refuses locks)", d)
		default:
			c.MaxTTL = d
		}
	}
	if e, ok := m["wait_for_replicas"]; ok {
		if n, ok := p.replicas(e, "wait_for_replicas"); ok {
			c.WaitForReplicas = n
		}
	}
	if e, ok := m["min_interval"]; ok {
		if d, ok := p.duration(e, "min_interval"); ok {
			if d <= 0 {
				p.fail(e.val.Line, "min_interval", "%v: must be positive, e.g. 1s (the shortest time between two ticks of a job)", d)
			} else {
				c.MinInterval = d
			}
		}
	}
	if e, ok := m["nodes"]; ok {
		c.Nodes = p.nodes(e, c.WaitForReplicas)
		if n := len(c.Nodes); n > 0 && n%2 == 0 && !c.AllowEvenNodes {
			p.fail(e.key.Line, "nodes", "%d nodes is an even count, which tolerates no more failed nodes than %d: use an odd count (3 or 5), or set allow_even_nodes: true", n, n-1)
		}
		if len(c.Nodes) > 0 && c.Nodes[0].Cluster != nil && strings.Contains(c.BootKey, "{") {
			p.fail(bootKeyLine, "boot_key", "%q: where the nodes are Redis Clusters, it is the prefix of one marker per hash slot and must not contain \"{\": drop the hash tag", c.BootKey)
		}
	} else {
		p.fail(0, "nodes", `missing: give the addresses of independent Redis nodes, e.g. nodes: ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"]`)
	}
	e, hasJobs := m["jobs"]
	if hasJobs {
		c.Jobs = p.jobs(e, c.MaxTTL, maxTTLOK, c.MinInterval)
	}
	e, hasCrontab := m["crontab"]
	if hasCrontab {
		var jobs []Job
		jobs, c.Crontab = p.readCrontab(e, c.MaxTTL, maxTTLOK, c.MinInterval)
		c.Jobs = append(c.Jobs, p.crontabNames(c.Jobs, jobs)...)
	}
	if !hasJobs && !hasCrontab && !p.opts.nodesOnly {
		p.fail(0, "jobs", "missing: give at least one job with name:, schedule: and command:, or a crontab: file")
	}
	for i := range c.Jobs {
		j := &c.Jobs[i]
		var err error
		if j.KillGrace, err = j.KillGraceFor(c.KillGrace, c.KillGraceGiven); err != nil {
			p.fail(killGraceLine, "kill_grace", "%v", err)
		}
	}
	p.secretsInEnv(c)
	return c
}

// secretsInEnv refuses the NAME_env: entries of the jobs' env: that would hand a job the HTTP
// token or a node's password: the daemon's secrets never reach a job.
func (p *parser) secretsInEnv(c *Config) {
	secret := map[string]string{}
	if c.HTTPTokenEnv != "" {
		secret[c.HTTPTokenEnv] = "the HTTP server's bearer token (http_token_env)"
	}
	for i, n := range c.Nodes {
		if n.PasswordEnv != "" {
			secret[n.PasswordEnv] = fmt.Sprintf("the password of nodes[%d] (password_env)", i)
		}
	}
	for _, j := range c.Jobs {
		for _, v := range j.Env {
			if what, ok := secret[v.Value]; v.fromEnv && ok {
				p.failIn(v.file, v.line, v.path, "%s holds %s, which no job is given: give the job a credential of its own in another variable", v.Value, what)
			}
		}
	}
}

func (p *parser) tracing(e entry, t *Tracing) {
	if e.val.Kind != yaml.MappingNode {
		p.fail(e.val.Line, "tracing", "must be a mapping (otlp_endpoint:, service_name:), not %s", kindName(e.val))
		return
	}
	m := p.mapping(e.val, "tracing", []string{"otlp_endpoint", "service_name", "ui_url"}, false)
	if e, ok := m["ui_url"]; ok {
		if s, ok := p.str(e, "tracing.ui_url"); ok && s != "" {
			u, err := url.Parse(strings.ReplaceAll(s, "{trace_id}", "x"))
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || !strings.Contains(s, "{trace_id}") {
				p.fail(e.val.Line, "tracing.ui_url", "%q: give an http(s) URL with {trace_id} in it, e.g. http://127.0.0.1:16686/trace/{trace_id} (Jaeger)", s)
			}
			t.UIURL = s
		}
	}
	if e, ok := m["otlp_endpoint"]; ok {
		if s, ok := p.str(e, "tracing.otlp_endpoint"); ok && s != "" {
			u, err := url.Parse(s)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.fail(e.val.Line, "tracing.otlp_endpoint", "%q is not an http:// or https:// URL, e.g. http://127.0.0.1:4318 (or \"\" for no tracing)", s)
			}
			t.OTLPEndpoint = s
		}
	}
	if e, ok := m["service_name"]; ok {
		if s, ok := p.str(e, "tracing.service_name"); ok {
			if s == "" {
				p.fail(e.val.Line, "tracing.service_name", "is empty: give a name, or leave it out for %q", DefaultServiceName)
			} else {
				t.ServiceName = s
			}
		}
	}
}

// checkHostPort checks host:port; the port may be 0 when zeroPort is set.
func checkHostPort(s string, zeroPort bool) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return errors.New("not host:port")
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && !zeroPort) {
		return fmt.Errorf("port %q is not a port number", port)
	}
	return nil
}

// replicas parses a wait_for_replicas at path: a count of replicas, 0 or more. ok is false
// when it is not (and reported).
func (p *parser) replicas(e entry, path string) (n int, ok bool) {
	n, ok = p.integer(e, path)
	if ok && n < 0 {
		p.fail(e.val.Line, path, "%d is negative: give how many replicas of each node must acknowledge a lock, e.g. 1 (0: do not wait)", n)
		return 0, false
	}
	return n, ok
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// nodes parses the nodes; replicas is the top level's wait_for_replicas, the count of the
// nodes that do not give their own.
func (p *parser) nodes(e entry, replicas int) []Node {
	if e.val.Kind != yaml.SequenceNode {
		p.fail(e.val.Line, "nodes", `must be a list of host:port, e.g. ["10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"], not %s`, kindName(e.val))
		return nil
	}
	if len(e.val.Content) == 0 {
		p.fail(e.val.Line, "nodes", "is empty: give the addresses of 3 (or 5) independent Redis nodes")
		return nil
	}
	var out []Node
	first := map[string]int{} // addr/db → index
	for i, item := range e.val.Content {
		path := fmt.Sprintf("nodes[%d]", i)
		item = p.resolve(item)
		if item == nil {
			return nil
		}
		n := Node{file: p.file, index: i, Line: item.Line, WaitForReplicas: replicas}
		addrLine := item.Line
		switch item.Kind {
		case yaml.ScalarNode:
			if isNull(item) {
				p.fail(item.Line, path, "is empty: give host:port, or a mapping with addr: or cluster:")
				continue
			}
			n.Addr = item.Value
		case yaml.MappingNode:
			m := p.mapping(item, path, []string{"addr", "cluster", "username", "password_env", "tls", "db", "wait_for_replicas"}, false)
			a, hasAddr := m["addr"]
			c, hasCluster := m["cluster"]
			switch {
			case hasAddr && hasCluster:
				p.fail(c.key.Line, path, "has both addr and cluster: give addr: for a standalone Redis server, or cluster: for the members of a Redis Cluster")
				continue
			case hasAddr:
				n.Addr, _ = p.str(a, path+".addr")
				addrLine = a.val.Line
			case hasCluster:
				if n.Cluster = p.cluster(c, path+".cluster"); n.Cluster == nil {
					continue
				}
				addrLine = c.val.Line
			default:
				p.fail(item.Line, path+".addr", "missing: give the node's host:port (or cluster: with the members of a Redis Cluster)")
				continue
			}
			if u, ok := m["username"]; ok {
				n.Username, _ = p.str(u, path+".username")
			}
			if pe, ok := m["password_env"]; ok {
				if s, ok := p.str(pe, path+".password_env"); ok {
					if !envName.MatchString(s) {
						p.fail(pe.val.Line, path+".password_env", "%q is not the name of an environment variable (letters, digits and _): give the variable that holds the password, not the password", s)
					} else {
						n.PasswordEnv, n.passwordEnvLine = s, pe.val.Line
					}
				}
			}
			if t, ok := m["tls"]; ok {
				n.TLS, _ = p.boolean(t, path+".tls")
			}
			if d, ok := m["db"]; ok {
				if db, ok := p.integer(d, path+".db"); ok {
					switch {
					case db < 0:
						p.fail(d.val.Line, path+".db", "%d is negative: give a database number, e.g. 0", db)
					case db != 0 && n.Cluster != nil:
						p.fail(d.val.Line, path+".db", "%d: a Redis Cluster has database 0 only: drop db:", db)
					}
					n.DB = db
				}
			}
			if w, ok := m["wait_for_replicas"]; ok {
				if r, ok := p.replicas(w, path+".wait_for_replicas"); ok {
					n.WaitForReplicas = r
				}
			}
		default:
			p.fail(item.Line, path, "must be host:port or a mapping with addr: or cluster:, not %s", kindName(item))
			continue
		}
		if n.Addr == "" && n.Cluster == nil {
			continue // reported, or a bad addr type
		}
		addrs := n.Cluster
		if n.Cluster == nil {
			if err := checkHostPort(n.Addr, false); err != nil {
				p.fail(addrLine, path, "%q: %v: give host:port, e.g. \"10.0.0.1:6379\"", n.Addr, err)
				continue
			}
			addrs = []string{n.Addr}
		}
		if len(out) > 0 && (out[0].Cluster == nil) != (n.Cluster == nil) {
			p.fail(addrLine, path, "is %s, but nodes[%d] is %s: the nodes must be all standalone servers or all Redis Clusters (with Clusters the boot markers are per hash slot on every node): make every node a cluster: list of members, or none", nodeKind(n), out[0].index, nodeKind(out[0]))
			continue
		}
		dup := false
		for _, addr := range addrs {
			id := fmt.Sprintf("%s/%d", addr, n.DB)
			if j, seen := first[id]; seen {
				p.fail(addrLine, path, "%q is listed twice (also nodes[%d]): the nodes must be independent Redis servers or Clusters", addr, j)
				dup = true
				break
			}
			first[id] = i
		}
		if !dup {
			out = append(out, n)
		}
	}
	return out
}

// nodeKind says what kind of node n is, for messages.
func nodeKind(n Node) string {
	if n.Cluster != nil {
		return "a Redis Cluster"
	}
	return "a standalone server"
}

// cluster returns the members of a cluster: list, or nil when it is reported.
func (p *parser) cluster(e entry, path string) []string {
	example := `e.g. cluster: ["10.0.1.1:6379", "10.0.1.2:6379", "10.0.1.3:6379"]`
	if e.val.Kind != yaml.SequenceNode {
		p.fail(e.val.Line, path, "must be a list of the host:port of the Cluster's members, %s, not %s", example, kindName(e.val))
		return nil
	}
	if len(e.val.Content) == 0 {
		p.fail(e.val.Line, path, "is empty: give the host:port of one or more members of the Redis Cluster, %s", example)
		return nil
	}
	var addrs []string
	for j, a := range e.val.Content {
		apath := fmt.Sprintf("%s[%d]", path, j)
		if a = p.resolve(a); a == nil {
			return nil
		}
		if a.Kind != yaml.ScalarNode || isNull(a) {
			p.fail(a.Line, apath, "must be host:port, not %s", kindName(a))
			return nil
		}
		if err := checkHostPort(a.Value, false); err != nil {
			p.fail(a.Line, apath, "%q: %v: give host:port of a member, e.g. \"10.0.1.1:6379\"", a.Value, err)
			return nil
		}
		if k := slices.Index(addrs, a.Value); k >= 0 {
			p.fail(a.Line, apath, "%q is listed twice (also %s[%d]): list each member once", a.Value, path, k)
			return nil
		}
		addrs = append(addrs, a.Value)
	}
	return addrs
}

var jobKeys = []string{"name", "schedule", "command", "timeout", "lock_ttl", "renew_every", "overlap", "retries", "catch_up", "jitter", "output_level", "output_limit", "output_keep", "env", "working_dir"}

// fieldKeys maps the fields of job.InvalidError to the keys of a job.
var fieldKeys = map[string]string{
	"Name":               "name",
	"Spec":               "schedule",
	"Options.Timeout":    "timeout",
	"Options.LockTTL":    "lock_ttl",
	"Options.RenewEvery": "renew_every",
	"Options.Overlap":    "overlap",
	"Options.Retries":    "retries",
	"Options.CatchUp":    "catch_up",
	"Options.Jitter":     "jitter",
}

// goNames rewrites the Go names that job.Job.Validate's problems mention (e.g. "more than half
// of LockTTL 30s") into the keys and values the user wrote.
var goNames = strings.NewReplacer(
	"LockTTL", "lock_ttl", "RenewEvery", "renew_every", "CatchUp", "catch_up",
	"job.Forbid", "forbid", "job.Allow", "allow", "job.Replace", "replace",
)

func (p *parser) jobs(e entry, maxTTL time.Duration, maxTTLOK bool, minInterval time.Duration) []Job {
	if e.val.Kind != yaml.SequenceNode {
		p.fail(e.val.Line, "jobs", "must be a list of jobs (each with name:, schedule: and command:), not %s", kindName(e.val))
		return nil
	}
	if len(e.val.Content) == 0 {
		p.fail(e.val.Line, "jobs", "is empty: give at least one job with name:, schedule: and command:")
		return nil
	}
	var out []Job
	names := map[string]int{} // name → index
	for i, item := range e.val.Content {
		path := fmt.Sprintf("jobs[%d]", i)
		item = p.resolve(item)
		if item == nil {
			return nil
		}
		if item.Kind != yaml.MappingNode {
			p.fail(item.Line, path, "must be a mapping (name:, schedule:, command:, …), not %s", kindName(item))
			continue
		}
		if j, ok := p.job(item, path, maxTTL, maxTTLOK, minInterval); ok {
			if k, dup := names[j.Name]; dup {
				p.fail(j.Line, path+".name", "%q is already the name of jobs[%d] (line %d): give each job its own name", j.Name, k, out[k].Line)
				continue
			}
			names[j.Name] = len(out)
			out = append(out, j)
		}
	}
	return out
}

// job parses one job; false when it has a problem (reported).
func (p *parser) job(item *yaml.Node, path string, maxTTL time.Duration, maxTTLOK bool, minInterval time.Duration) (Job, bool) {
	before := p.count()
	j := Job{File: p.file, Line: item.Line, OutputLevel: slog.LevelInfo, OutputLimit: DefaultOutputLimit, OutputKeep: DefaultOutputKeep}
	m := p.mapping(item, path, jobKeys, false)
	line := func(key string) int {
		if e, ok := m[key]; ok {
			return e.val.Line
		}
		return item.Line
	}
	if e, ok := m["name"]; ok {
		j.Name, _ = p.str(e, path+".name")
		if j.Name == "." || j.Name == ".." {
			p.fail(e.val.Line, path+".name", "%q cannot be a segment of the URLs of the job's buttons and history (browsers drop it): give the job a name with letters, e.g. \"backup\"", j.Name)
		}
	} else {
		p.fail(item.Line, path+".name", `missing: give the job a name that is the same on every host, e.g. "backup"`)
	}
	if e, ok := m["schedule"]; ok {
		if s, ok := p.str(e, path+".schedule"); ok {
			j.Schedule = s
			resolved, err := schedseam.ResolveSpec(s, j.Name) // H is hashed from the name
			var sched cron.Schedule
			if err == nil {
				sched, err = scheduler.ParseSpec(resolved, time.UTC)
			}
			switch {
			case err != nil:
				p.fail(e.val.Line, path+".schedule", "%v", err)
			case sched.Next(time.Now()).IsZero():
				p.fail(e.val.Line, path+".schedule", "%q never fires: no matching time in the next five years (a date such as 30 February?)", s)
			default:
				if gap := tickmath.ShortestGap(sched, time.Now()); gap < minInterval {
					p.fail(e.val.Line, path+".schedule", "%q fires %v apart, more often than min_interval %v: each tick starts a process on some host; give a slower schedule, or lower min_interval (e.g. min_interval: %v)", s, gap, minInterval, gap)
				}
			}
		}
	} else {
		p.fail(item.Line, path+".schedule", `missing: give a cron spec, e.g. "0 */5 * * * *" (second 0 of every fifth minute) or "@every 10s"`)
	}
	if e, ok := m["command"]; ok {
		j.Command = p.command(e, path+".command")
	} else {
		p.fail(item.Line, path+".command", `missing: give the program and its arguments as a list, e.g. ["/usr/local/bin/backup", "--fast"]`)
	}
	for _, d := range []struct {
		key string
		to  *time.Duration
	}{{"timeout", &j.Timeout}, {"lock_ttl", &j.LockTTL}, {"renew_every", &j.RenewEvery}, {"catch_up", &j.CatchUp}, {"jitter", &j.Jitter}} {
		if e, ok := m[d.key]; ok {
			*d.to, _ = p.duration(e, path+"."+d.key)
		}
	}
	if e, ok := m["overlap"]; ok {
		if s, ok := p.str(e, path+".overlap"); ok {
			switch s {
			case "forbid":
				j.Overlap = job.Forbid
			case "allow":
				j.Overlap = job.Allow
			case "replace":
				j.Overlap = job.Replace
			default:
				p.fail(e.val.Line, path+".overlap", "%q is not an overlap policy: use forbid (the default: no two runs of the job at once, cluster-wide; a tick that comes while one runs is skipped), replace (a tick stops the run under way, then starts) or allow", s)
			}
		}
	}
	if e, ok := m["retries"]; ok {
		j.Retries, _ = p.integer(e, path+".retries")
	}
	if e, ok := m["output_level"]; ok {
		if s, ok := p.str(e, path+".output_level"); ok {
			if err := j.OutputLevel.UnmarshalText([]byte(s)); err != nil {
				p.fail(e.val.Line, path+".output_level", "%q is not a log level: use debug, info (the default), warn or error", s)
			}
		}
	}
	if e, ok := m["output_limit"]; ok {
		j.OutputLimit, _ = p.size(e, path+".output_limit")
	}
	if e, ok := m["output_keep"]; ok {
		if n, ok := p.size(e, path+".output_keep"); ok && n > scheddefault.MaxOutput {
			p.fail(e.val.Line, path+".output_keep", "%d bytes is more than a history record keeps: give at most %d (64KiB)", n, scheddefault.MaxOutput)
		} else {
			j.OutputKeep = n
		}
	}
	if e, ok := m["env"]; ok {
		j.Env = p.env(e, path+".env")
	}
	if e, ok := m["working_dir"]; ok {
		if s, ok := p.str(e, path+".working_dir"); ok {
			if s == "" {
				p.fail(e.val.Line, path+".working_dir", "is empty: give the directory the command runs in, e.g. /var/lib/backup, or leave it out for the daemon's")
			}
			j.WorkingDir = s
		}
	}
	if p.count() > before {
		return j, false
	}
	err := job.Job{Name: j.Name, Spec: j.Schedule, Handler: func(context.Context) error { return nil }, Options: j.Options()}.Validate()
	if ie, ok := errors.AsType[*job.InvalidError](err); ok {
		key, known := fieldKeys[ie.Field]
		if !known {
			p.fail(item.Line, path, "%s: %s", ie.Field, ie.Problem)
		} else {
			p.fail(line(key), path+"."+key, "%s", goNames.Replace(ie.Problem))
		}
		return j, false
	} else if err != nil {
		p.fail(item.Line, path, "%v", err)
		return j, false
	}
	if ttl := jobseam.WithDefaults(j.Options()).LockTTL; maxTTLOK && ttl > maxTTL {
		if _, given := m["lock_ttl"]; given {
			p.fail(line("lock_ttl"), path+".lock_ttl", "%v is longer than max_ttl %v (the longest lock TTL, which is also a restarted node's quarantine): lower lock_ttl, or raise max_ttl", ttl, maxTTL)
		} else {
			p.fail(item.Line, path+".lock_ttl", "the default %v is longer than max_ttl %v: give lock_ttl of at most %v, or raise max_ttl", ttl, maxTTL, maxTTL)
		}
		return j, false
	}
	return j, true
}

// command parses a job's command: a non-empty list of strings.
func (p *parser) command(e entry, path string) []string {
	if e.val.Kind != yaml.SequenceNode {
		p.fail(e.val.Line, path, `must be a list: the program and its arguments, run without a shell, e.g. ["/usr/local/bin/backup", "--fast"] or ["sh", "-c", "backup --fast | gzip"]; not %s`, kindName(e.val))
		return nil
	}
	if len(e.val.Content) == 0 {
		p.fail(e.val.Line, path, `is empty: give the program and its arguments, e.g. ["/usr/local/bin/backup", "--fast"]`)
		return nil
	}
	var argv []string
	for i, a := range e.val.Content {
		a = p.resolve(a)
		if a == nil {
			return nil
		}
		if a.Kind != yaml.ScalarNode || isNull(a) {
			p.fail(a.Line, fmt.Sprintf("%s[%d]", path, i), "must be a string, not %s", kindName(a))
			return nil
		}
		argv = append(argv, a.Value)
	}
	if strings.TrimSpace(argv[0]) == "" {
		p.fail(e.val.Content[0].Line, path+"[0]", "is empty: give the program to run, e.g. /usr/local/bin/backup")
		return nil
	}
	return argv
}
