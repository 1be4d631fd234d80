// Package fence is the store's half of fencing: a write that carries a fencing token is
// applied only while no newer token has been seen for its resource.
//
// A lock alone cannot stop a holder that was paused (a GC pause, SIGSTOP, a slow disk) past
// its lease: when it resumes it still believes it holds the lock, and writes — even if it
// checked its lease just before it froze. cronlock gives every run a token
// (job.Run.FencingToken) greater than the tokens of the runs of that job before it
// (guarantee 3 of docs/guarantees.md). The store keeps, per resource, the highest token a
// write carried, and checks it in the same transaction or script as the write: a write with a
// lower token is refused with an error matching ErrStale, and nothing of it lands.
//
// A token equal to the stored one passes: it is the same holder writing again (a run makes
// several writes). Runs of one job that overlap (overlap: allow) may get equal tokens, and then
// both pass; fence only writes made under a lock that forbids overlap.
//
// A handler needs three lines:
//
//	run, _ := job.RunFrom(ctx)
//	err := pgfence.Write(ctx, pool, pgx.TxOptions{}, run.Job, run.FencingToken,
//		func(tx pgx.Tx) error { _, err := tx.Exec(ctx, "UPDATE …"); return err })
//	if errors.Is(err, fence.ErrStale) { return err } // a newer run has written
//
// The resource names the data the writes guard and must be the same for every run of the job
// (the job's name is a good one); writes of one job to several resources may use one name for
// all of them.
//
// # API at a glance
//
//	| package    | call                           | what it does                                              |
//	|------------|--------------------------------|-----------------------------------------------------------|
//	| fence      | ErrStale, StaleError           | the error of a refused write (resource, token, stored)    |
//	| pgfence    | Schema, MaxToken               | DDL of the fence table (schema.sql); its largest token    |
//	| pgfence    | Check / CheckSQL               | check inside the caller's pgx or database/sql transaction |
//	| pgfence    | Write / WriteSQL, Beginner     | begin, check, run the caller's writes, commit             |
//	| redisfence | Set, HSet, Del                 | one guarded Redis write (a script)                        |
//	| redisfence | NewScript, Script.Run          | the caller's own Lua write under the check                |
//	| redisfence | Key                            | the fence key of a resource: "{resource}:fence"           |
//
// The stores are in their own packages so that a program pulls in only the client it uses:
// fence/pgfence (pgx and database/sql) and fence/redisfence (go-redis).
//
// # What the check does not do
//
// It guards only writes that go through it: a write that bypasses the check (another program,
// a migration, a write to a table the transaction does not fence) is not refused. It relies on
// the store keeping the fence: a Postgres fence row is as durable as the transaction; a Redis
// fence key is lost with the data when a node restarts without persistence, is evicted under a
// maxmemory policy other than noeviction, or is not yet on the replica promoted in a failover
// (see package redisfence). docs/guarantees.md says what it adds to the lease.
package fence
