// Package chaos is cronlock's fault-injection suite: a harness that runs worker processes
// against five real redis-server nodes, each behind a fault proxy per worker, applies a
// seeded schedule of faults — node kills and restarts with and without AOF, a majority down,
// latency, blackholes, partitions and resets, paused and killed workers, worker clock steps,
// node clock jumps, and faults landed in a burst of jobs all due at one instant (stops and
// reloads among them) — and a checker that verifies the guarantees of docs/guarantees.md from the
// workers' ledger and a fenced store.
//
// The workers are testworkers (internal/testworker: the scheduler package with a clock that
// can be stepped) and daemon workers (cronlock run processes whose jobs are shell commands,
// daemon.go). Both write the same ledger; a daemon worker's run ends, for the checker, when
// the last of its processes is gone, which the harness learns from a flock the run holds, so
// the checker verifies that the daemon's supervisor ends a run's processes before its lock can
// pass to another worker. Daemon workers get every fault but clock steps (the daemon has no
// offset clock).
//
// The fenced store is a script on the ledger node (RedisStore), or a Postgres server with
// package pgfence's check (PostgresStore), so that the store itself refuses stale writes and
// the checker reads what it accepted and refused from Postgres.
//
// Run it with make chaos (DURATION, SEED, FAULTS and DAEMONS say how long, which schedule,
// which fault classes and how many of the four workers are daemons; BURST the size of the
// burst set; FENCE=postgres picks the Postgres store); a failing run prints the command that replays its schedule. The figures of docs/reliability.md come from it. The
// harness needs Linux (process signals, /proc, Pdeathsig, flock, libfaketime) and redis-cli;
// the checker and the schedule are portable and unit-tested anywhere; the Postgres store
// needs the binaries internal/pgtest finds.
package chaos
