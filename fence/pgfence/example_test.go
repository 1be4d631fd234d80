package pgfence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/pgfence"
	"github.com/cronlock/cronlock/job"
)

// A scheduled job's handler writes under its run's token: a run that was frozen past its lease
// while a newer run wrote is refused, and nothing of its transaction commits.
func ExampleWrite() {
	var conn *pgx.Conn // connected, with pgfence.Schema() run once
	handler := func(ctx context.Context) error {
		run, _ := job.RunFrom(ctx)
		err := pgfence.Write(ctx, conn, pgx.TxOptions{}, run.Job, run.FencingToken, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, `UPDATE reports SET generated_at = $1 WHERE day = $2`, time.Now(), run.Tick)
			return err
		})
		if errors.Is(err, fence.ErrStale) {
			// A newer run of the job has written; none of this run's writes landed.
			return fmt.Errorf("superseded: %w", err)
		}
		return err
	}
	_ = job.Job{Name: "daily-report", Spec: "0 0 6 * * *", Handler: handler}
}
