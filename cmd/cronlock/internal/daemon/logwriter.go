package daemon

import (
	"context"
	"io"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
)

// logWriter is where the daemon's log lines go: its stderr. A line that cannot be written —
// the reader of a pipe went away, a disk is full — is counted and dropped, and the daemon goes
// on: its runs and locks matter more than its log. (The daemon also receives SIGPIPE, see
// runDaemon, so that a write to a closed pipe fails instead of killing the process.) Each
// Write is one line: the slog handlers write a record at once.
type logWriter struct {
	w       io.Writer
	dropped atomic.Int64
}

func (l *logWriter) Write(p []byte) (int, error) {
	n, err := l.w.Write(p)
	if err != nil {
		l.dropped.Add(1)
	}
	return n, err
}

// register reports the count of dropped lines as cronlock.log.lines.dropped (Prometheus:
// cronlock_log_lines_dropped_total).
func (l *logWriter) register(mp metric.MeterProvider) error {
	_, err := mp.Meter(meterScope).Int64ObservableCounter("cronlock.log.lines.dropped",
		metric.WithDescription("Log lines the daemon could not write to its stderr (its reader went away), and dropped."),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(l.dropped.Load())
			return nil
		}))
	return err
}
