// Package nodes owns cronlock's view of its lock nodes: the go-redis clients made from the
// config (a standalone server or a Redis Cluster per node), the redlock client over them, the
// readiness probe behind /readyz and the daemon's log of node state changes (Readiness), the
// health check of `cronlock check` (Check), the key listing of `cronlock locks` (Locks), and
// go-redis's own log lines, rate-limited into the daemon's log (LogRedisTo).
//
// A Cluster node is probed member by member: its topology (which primary serves which hash
// slot), and the boot markers of the hash slots of the jobs' keys, which decide its quarantine.
// The package reads the jobs' key layout from packages redlock and middleware, and writes no
// key but the boot markers (Check with endQuarantine).
package nodes
