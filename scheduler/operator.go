package scheduler

import (
	"context"

	"github.com/cronlock/cronlock/internal/schedseam"
)

type operatorKey struct{}

// WithOperator returns a copy of ctx that names the operator who asks: a Control's Pause,
// Resume and Trigger, and Scheduler.Backfill, called with it record that name — in the pause
// (job.Pause.By), in the manual and backfilled runs (job.Run.By, Record.By) and in their log
// lines — instead of the replica's name (WithReplica). The name must have 1 to 64 printable
// characters (spaces allowed), not only spaces: for another, those methods return an error
// that says which rule it broke, before doing anything.
func WithOperator(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, operatorKey{}, name)
}

// operator returns the operator named by ctx (WithOperator), checked, else fallback.
func operator(ctx context.Context, fallback string) (string, error) {
	name, ok := ctx.Value(operatorKey{}).(string)
	if !ok {
		return fallback, nil
	}
	if err := schedseam.CheckOperator(name); err != nil {
		return "", err
	}
	return name, nil
}
