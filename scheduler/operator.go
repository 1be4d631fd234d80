package scheduler

import (
	"context"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// maxOperatorLen is the most characters an operator's name may have (CheckOperator).
const maxOperatorLen = 64

type operatorKey struct{}

// WithOperator returns a copy of ctx that names the operator who asks: Pause, Resume, Trigger
// and Backfill, of a Scheduler or a Control, called with it record that name — in the pause
// (job.Pause.By), in the manual and backfilled runs (job.Run.By, Record.By) and in their log
// lines — instead of the replica's name (WithReplica). Those methods return CheckOperator's
// error for a name it refuses, before doing anything.
func WithOperator(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, operatorKey{}, name)
}

// CheckOperator returns an error unless name can name an operator (WithOperator): 1 to
// 64 printable characters (spaces allowed), not only spaces. The error says which
// rule it broke and how to fix it.
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

// operator returns the operator named by ctx (WithOperator), checked, else fallback.
func operator(ctx context.Context, fallback string) (string, error) {
	name, ok := ctx.Value(operatorKey{}).(string)
	if !ok {
		return fallback, nil
	}
	if err := CheckOperator(name); err != nil {
		return "", err
	}
	return name, nil
}
