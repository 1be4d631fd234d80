// Package chaos is cronlock's fault-injection suite: a harness that runs worker processes
// (internal/testworker) against five real redis-server nodes, each behind a fault proxy per
// worker, applies a seeded schedule of faults — node kills and restarts with and without AOF,
// a majority down, latency, blackholes, partitions and resets, paused and killed workers,
// worker clock steps, node clock jumps — and a checker that verifies the guarantees of
// docs/guarantees.md from the workers' ledger and a fenced store.
//
// Run it with make chaos (DURATION, SEED and FAULTS say how long, which schedule and which
// fault classes); a failing run prints the command that replays its schedule. The figures of
// docs/reliability.md come from it. The harness needs Linux (process signals, /proc,
// Pdeathsig, libfaketime); the checker and the schedule are portable and unit-tested anywhere.
package chaos
