package outcome_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cronlock/cronlock/internal/outcome"
)

// Users compare Record.Outcome, span attributes and metric labels with the strings the docs
// give: every outcome must be in each place that lists them.
func TestEveryOutcomeIsDocumented(t *testing.T) {
	values := constants(t)
	if len(values) == 0 {
		t.Fatal("no outcome constants found in outcome.go")
	}
	read := func(path string) string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	handlerChain := read("../../docs/scheduler.md")
	observability := read("../../docs/observability.md")
	_, spanAttr, _ := strings.Cut(observability, "| `cronlock.outcome` | string |")
	spanAttr, _, _ = strings.Cut(spanAttr, "\n")
	outcomeDoc := read("../../middleware/outcome.go")
	for _, v := range values {
		if !strings.Contains(handlerChain, "| `"+v+"` |") {
			t.Errorf("%q: not in the outcome table of docs/scheduler.md", v)
		}
		if !strings.Contains(spanAttr, "`"+v+"`") {
			t.Errorf("%q: not among the values of cronlock.outcome in docs/observability.md", v)
		}
		if !strings.Contains(outcomeDoc, "//\t"+strconv.Quote(v)+" ") {
			t.Errorf("%q: not in the doc comment of middleware.Outcome", v)
		}
	}
}

// constants returns the values of the string constants declared in outcome.go.
func constants(t *testing.T) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "outcome.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return true
	})
	return out
}

// All lists every outcome once: the metrics pre-build their attributes from it.
func TestAllListsEveryOutcome(t *testing.T) {
	values := constants(t)
	if !slices.Equal(values, outcome.All) {
		t.Errorf("outcome.All is %q, the constants are %q", outcome.All, values)
	}
}
