// Package redisfence fences writes to Redis: a write that carries a fencing token is applied
// only while no newer token has been seen for its resource (package fence says why).
//
// Each resource has a fence key, Key(resource) = "{resource}:fence", holding the highest token
// seen. A guarded write is one Lua script that compares the fence key with the token, makes
// the write only if the token is not lower, and stores the token, atomically: Set (SET with an
// optional expiry), HSet and Del, or the caller's own Lua under the check (NewScript and
// Script.Run). A refused write returns a *fence.StaleError (matching fence.ErrStale) and
// writes nothing. The data keys must carry the tag {resource}, so that they share the fence
// key's hash slot and the script runs on one node of a Redis Cluster; a key in another slot is
// refused before anything is sent.
//
//	run, _ := job.RunFrom(ctx)
//	err := redisfence.Set(ctx, rdb, run.Job, run.FencingToken, "{"+run.Job+"}:report", report, 0)
//	if errors.Is(err, fence.ErrStale) { return err } // a newer run has written
//
// # Durability
//
// The check is as good as the fence key, which lives and dies with the data:
//
//   - A node that restarts without an fsync'd append-only file (appendonly yes, appendfsync
//     always) comes back without the fence key, and then accepts any token. If the data came
//     back with it, so can a stale write.
//   - Under a maxmemory-policy other than noeviction the fence key can be evicted: run the
//     data's nodes with noeviction, or give the fence key no competition.
//   - Replication is asynchronous: a failover can promote a replica that has not yet received
//     the fence key's last value, and then a stale holder's write is accepted there. WAIT (go-redis
//     Client.Wait) after a guarded write, or WAITAOF, makes that less likely without ruling it
//     out.
//   - Writes that do not go through a guarded script are not checked.
package redisfence
