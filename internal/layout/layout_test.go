package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cronlock/cronlock/internal/layout"
	"github.com/cronlock/cronlock/job"
)

// The keys are the stored format of every released version: a replica of the version before
// must find what this one writes.
func TestKeysAreTheStoredFormat(t *testing.T) {
	tick := time.UnixMilli(1700000000123)
	for got, want := range map[string]string{
		layout.TickKey("cl", "j", tick):           "{cl:j}:tick:1700000000123",
		layout.AttemptsKey("cl", "j", tick):       "{cl:j}:attempts:1700000000123",
		layout.RunKey("cl", "j"):                  "{cl:j}:run",
		layout.TriggerKey("cl", "j", "t1"):        "{cl:j}:trigger:t1",
		layout.PauseKey("cl", "j"):                "{cl:j}:paused",
		layout.HistoryKey("cl", "j"):              "{cl:j}:history",
		layout.OutputKey("cl", "j"):               "{cl:j}:history:output",
		layout.RecordMarkerKey("cl", "j", "17/4"): "{cl:j}:history:17/4",
		layout.RunningKey("cl", "j"):              "{cl:j}:running",
		layout.TriggersKey("cl"):                  "{cl}:triggers",
		layout.TriggersChannel("cl"):              "{cl}:triggers:asked",
		layout.ReplicasKey("cl"):                  "{cl}:replicas",
		layout.ReplaceChannel("cl"):               "{cl}:replace",
		layout.JobMatch("c*l", ""):                `{c\*l:*}:*`,
		layout.JobMatch("c*l", "j?"):              `{c\*l:j\?}:*`,
		layout.PauseValue(job.Pause{Reason: "r"}): `{"reason":"r"}`,
		layout.PauseValue(job.Pause{Reason: "r", By: "ann", Since: time.UnixMilli(5)}): `{"reason":"r","since_ms":5,"by":"ann"}`,
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if !strings.HasSuffix(layout.RunningKey("cl", "j"), layout.RunningSuffix) {
		t.Errorf("RunningSuffix %q does not end RunningKey", layout.RunningSuffix)
	}
}

func TestParseKey(t *testing.T) {
	tick := time.UnixMilli(1700000000123)
	for key, want := range map[string]layout.Key{
		layout.TickKey("cl", "j", tick):           {Job: "j", Kind: layout.KindTick, Rest: "tick:1700000000123", Tick: tick},
		layout.AttemptsKey("cl", "j", tick):       {Job: "j", Kind: layout.KindAttempts, Rest: "attempts:1700000000123", Tick: tick},
		layout.TriggerKey("cl", "j", "t1"):        {Job: "j", Kind: layout.KindTrigger, Rest: "trigger:t1", Trigger: "t1"},
		layout.RunKey("cl", "j"):                  {Job: "j", Kind: layout.KindRun, Rest: "run"},
		"{cl:j}:fence":                            {Job: "j", Kind: layout.KindFence, Rest: "fence"},
		layout.PauseKey("cl", "j"):                {Job: "j", Kind: layout.KindPaused, Rest: "paused"},
		layout.HistoryKey("cl", "j"):              {Job: "j", Kind: layout.KindHistory, Rest: "history"},
		layout.OutputKey("cl", "j"):               {Job: "j", Kind: layout.KindOutput, Rest: "history:output"},
		layout.RecordMarkerKey("cl", "j", "17/4"): {Job: "j", Kind: layout.KindMarker, Rest: "history:17/4"},
		layout.RunningKey("cl", "j"):              {Job: "j", Kind: layout.KindRunning, Rest: "running"},
		"{cl:j}:tick:soon":                        {Job: "j", Rest: "tick:soon"},
		"{other:j}:run":                           {},
		layout.TriggersKey("cl"):                  {},
	} {
		if got := layout.ParseKey("cl", key); got != want {
			t.Errorf("ParseKey(%s) = %+v, want %+v", key, got, want)
		}
	}
}

func TestParseLock(t *testing.T) {
	h := map[string]string{"v": "abc", "l": "host/1", "m": layout.SkippedMarker, "f": "42", "s": "done", "n": "2"}
	want := layout.Lock{Value: "abc", Label: "host/1", Metadata: layout.SkippedMarker, Token: "42", Done: true, Nested: 2}
	if got := layout.ParseLock(h); got != want || !got.Skipped() {
		t.Errorf("ParseLock = %+v (skipped %v), want %+v, skipped", got, got.Skipped(), want)
	}
	if got := layout.ParseLock(map[string]string{"v": "abc", "s": "held"}); got.Done || got.Skipped() {
		t.Errorf("a held lock parsed as %+v", got)
	}
}

func TestPauseRoundTrip(t *testing.T) {
	p := job.Pause{Reason: "deploy", By: "ann", Since: time.UnixMilli(1700000000000)}
	if got := layout.ParsePause(layout.PauseValue(p)); !got.Since.Equal(p.Since) || got.Reason != p.Reason || got.By != p.By {
		t.Errorf("round trip of %+v gave %+v", p, got)
	}
	if got := layout.ParsePause("set by hand"); got.Reason != "set by hand" {
		t.Errorf("a hand-written pause parsed as %+v", got)
	}
}

// hashField finds the fields that Lua code names in a hash command on a key: HGET k 'f',
// HMGET k 'a', 'b', HSET k 'a', v, 'b', v…, HEXISTS, HINCRBY, HDEL, and 'r' .. id.
var (
	hashCall  = regexp.MustCompile(`redis\.call\('(HGET|HMGET|HSET|HEXISTS|HINCRBY|HDEL)',\s*[^,]+,([^)]*)\)`)
	quoted    = regexp.MustCompile(`'([^']*)'`)
	doneState = regexp.MustCompile(`'s'[^\n]*'done'|'done'[^\n]*'s'`)
)

// TestScriptsUseLockFields: redlock's scripts write the lock hash; every field they name is one
// of the fields declared here, so that a reader of the hash (cronlock locks, Forget) that goes
// through this package reads what the scripts wrote.
func TestScriptsUseLockFields(t *testing.T) {
	known := []string{layout.FieldValue, layout.FieldLabel, layout.FieldMetadata, layout.FieldToken, layout.FieldState,
		layout.FieldNested, layout.FieldRevoked, layout.FieldOuter, layout.FieldWaiter, layout.FieldHoldPrefix, layout.FieldReleasedPrefix}
	scripts, err := filepath.Glob("../../redlock/scripts/*.lua")
	if err != nil || len(scripts) == 0 {
		t.Fatalf("no scripts found (%v)", err)
	}
	seen := map[string]bool{}
	for _, path := range scripts {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range hashCall.FindAllStringSubmatch(string(src), -1) {
			args := m[2]
			if m[1] == "HSET" || m[1] == "HINCRBY" {
				args = everyOther(args)
			}
			for _, q := range quoted.FindAllStringSubmatch(args, -1) {
				seen[q[1]] = true
				if !slices.Contains(known, q[1]) {
					t.Errorf("%s: %s names the lock field %q, which package layout does not declare", path, m[0], q[1])
				}
			}
		}
		for _, line := range doneState.FindAllString(string(src), -1) {
			if !strings.Contains(line, "'"+layout.FieldState+"'") || !strings.Contains(line, "'"+layout.StateDone+"'") {
				t.Errorf("%s: %s: the done state is not %s = %s", path, line, layout.FieldState, layout.StateDone)
			}
		}
	}
	for _, f := range []string{layout.FieldValue, layout.FieldLabel, layout.FieldMetadata, layout.FieldToken, layout.FieldState, layout.FieldNested} {
		if !seen[f] {
			t.Errorf("no script names the field %q that ParseLock reads", f)
		}
	}
}

// everyOther keeps the field names of HSET k f1, v1, f2, v2… (and HINCRBY k f, n): the
// arguments at even positions.
func everyOther(args string) string {
	parts := strings.Split(args, ",")
	var out []string
	for i := 0; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return strings.Join(out, ",")
}

// spelled finds a key or lock field spelled in a Go string literal outside this package: the
// start of a hash tag, a key part after one (in Go or Lua), or a lock field in a Lua hash
// command.
var spelled = regexp.MustCompile(`^"\{"$|^"\}:|'\}:|'(HGET|HMGET)',[^)]*'[a-z]'`)

// notKeys are the files whose "{" is not the start of a key: hashslot parses any key's hash
// tag, config refuses a boot key with one.
var notKeys = []string{"internal/hashslot/hashslot.go", "cmd/cronlock/internal/config/parse.go"}

// TestNoOtherPackageSpellsTheLayout: the module's non-test Go files build keys and read lock
// fields through this package. Package fence and its stores keep their own, documented key of
// a user's resource ({resource}:fence), and redlock its default fence counter of a hash tag;
// neither is cronlock's layout.
func TestNoOtherPackageSpellsTheLayout(t *testing.T) {
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			switch rel {
			case "internal/layout", "fence", "bench", "redlock", "tools", "deploy":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || slices.Contains(notKeys, filepath.ToSlash(rel)) {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING && spelled.MatchString(lit.Value) {
				s, _ := strconv.Unquote(lit.Value)
				t.Errorf("%s: %q spells a key or lock field: build it with package layout", fset.Position(lit.Pos()), s)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
