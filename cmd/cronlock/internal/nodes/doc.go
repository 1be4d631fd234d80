// Package nodes owns cronlock's view of its lock nodes: the go-redis clients made from the
// config (a standalone server or a Redis Cluster per node), the redlock client over them, the
// readiness probe behind /readyz and the daemon's log of node state changes (Readiness, whose
// report is a Status), and go-redis's own log lines, rate-limited into the daemon's log
// (LogRedisTo).
//
// A Cluster node is probed member by member (ReadCluster): its topology (which primary serves
// which hash slot), and the boot markers of the hash slots of the jobs' keys (SlotMarkers),
// which decide its quarantine. Packages check and lockkeys build on these probes; this package
// writes no key.
package nodes
