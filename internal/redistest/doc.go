// Package redistest runs real redis-server processes for tests, benchmarks
// and chaos experiments.
//
// Each [Server] is a separate redis-server process listening on its own free
// 127.0.0.1 port, with its own working directory and log file. The process
// can be killed (SIGKILL), stopped gracefully, restarted on the same port and
// directory, paused (SIGSTOP) and resumed (SIGCONT), and run with a skewed
// wall clock through libfaketime. Unless AOF is requested a server keeps
// everything in memory: a Kill followed by a Restart comes back empty.
//
// The core API ([New], [Server.Close]) returns errors and can be used from
// any program; [Start], [StartN] and [Key] are conveniences for tests that
// register cleanup with testing.TB.
//
// A [Cluster] is a Redis Cluster of primaries, each a Server with
// cluster-enabled yes, its slots assigned in contiguous ranges; [NewCluster]
// and [StartClusters] return once every member agrees on the slot map, and
// [Cluster.Restart] brings a member back empty with its slots. Clusters need
// Redis 7 (CLUSTER ADDSLOTSRANGE, CLUSTER SHARDS, cluster-port).
//
// # Process lifetime
//
// Every redis-server is started by a goroutine owned by its Server. That
// goroutine locks itself to its OS thread, starts the process and then waits
// for it (cmd.Wait) on the same thread, so the process is always reaped and
// Kill, Stop, Restart and Close return only after it has exited. On Linux the
// child is started with Pdeathsig=SIGKILL. Pdeathsig fires when the thread
// that forked the child exits, not when the process exits, and the Go
// runtime may start children from any thread; pinning the starting goroutine
// to its thread for the whole life of the child makes the signal fire exactly
// when the test binary dies (the thread only ends after the child is
// reaped), so a killed or crashed test binary leaves no redis-server behind.
//
// # Faketime
//
// With [Config.Faketime] set, redis-server itself (not a wrapper process, so
// Pause and Kill hit redis-server) is started with LD_PRELOAD=libfaketime and
// FAKETIME=<spec>, for example "+1h" or "-2s". Only the wall clock (TIME, key
// expiry, log timestamps) is shifted: FAKETIME_DONT_FAKE_MONOTONIC=1 keeps
// the monotonic clock real, as with real clock skew. The Debian/Ubuntu
// redis-server links jemalloc, and libfaketime 0.9.10 deadlocks with it at
// startup (jemalloc calls clock_gettime while holding its init lock before
// libfaketime is initialised, and libfaketime's initialisation calls malloc).
// To avoid this, glibc's libc_malloc_debug.so.0 is preloaded in front of
// libfaketime when it exists, so such a server allocates with glibc malloc
// instead of jemalloc. Servers without Faketime are not affected.
package redistest
