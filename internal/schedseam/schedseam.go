// Package schedseam gives cronlock's own packages the parts of package scheduler that they
// need and a user of scheduler does not: checking an operator's name before asking anything
// (the CLI and the web console) and resolving a spec's H forms (the config checks). Keeping
// them here keeps scheduler's exported API to what users call.
//
// CheckOperator is defined here, and package scheduler checks the names of WithOperator with
// it. Package scheduler sets the variables in an init function, with its unexported
// functions; a program that uses them imports scheduler.
package schedseam

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxOperatorLen is the most characters an operator's name may have (CheckOperator).
const maxOperatorLen = 64

// CheckOperator returns an error unless name can name an operator (scheduler.WithOperator):
// 1 to 64 printable characters (spaces allowed), not only spaces. The error says which rule
// it broke and how to fix it.
func CheckOperator(name string) error {
	switch n := utf8.RuneCountInString(name); {
	case strings.TrimSpace(name) == "":
		return fmt.Errorf("scheduler: operator name %q is empty: give who asks, e.g. %q", name, "alice")
	case !utf8.ValidString(name):
		return fmt.Errorf("scheduler: operator name %q is not UTF-8: give a name in plain text", name)
	case n > maxOperatorLen:
		return fmt.Errorf("scheduler: operator name %q is %d characters long: use at most %d", name, n, maxOperatorLen)
	}
	for _, r := range name {
		if r != ' ' && !unicode.IsPrint(r) {
			return fmt.Errorf("scheduler: operator name %q contains %q: use letters, digits, punctuation and spaces only", name, r)
		}
	}
	return nil
}

// ResolveSpec returns spec with every H of its cron fields replaced by concrete values hashed
// from the job's name, as the scheduler does for a job's spec before parsing it (the forms
// are in docs/scheduler.md, "Jitter and H"). Specs without H, descriptors and "@every d" are
// returned as they are; a malformed H is an error (*scheduler.SpecError) naming the field.
var ResolveSpec func(spec, name string) (string, error)
