// Package pgfence fences writes to PostgreSQL: a transaction that carries a fencing token
// commits only while no newer token has been seen for its resource (package fence says why).
//
// The fence table, cronlock_fence (Schema, the file schema.sql), holds one row per resource
// with the highest token seen. Check (pgx) and CheckSQL (database/sql, any Postgres driver)
// run inside the caller's transaction, beside its writes:
//
//	INSERT INTO cronlock_fence AS f (resource, token) VALUES ($1, $2)
//	ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token, updated_at = now()
//	WHERE f.token <= EXCLUDED.token
//	RETURNING f.token
//
// No row back means the stored token is higher: the check returns a *fence.StaleError and
// aborts the transaction, so nothing it wrote commits. Write and WriteSQL open the
// transaction, check, run the caller's writes and commit.
//
// # Concurrency
//
// The statement locks the resource's row until the transaction ends, so fenced transactions
// of one resource run one after another from their checks on. A writer that waits behind a
// newer holder's uncommitted transaction compares with that holder's token once it commits
// (READ COMMITTED re-reads the row it waited for), and is refused. Under REPEATABLE READ and
// SERIALIZABLE the waiter fails with a serialization failure (SQLSTATE 40001) instead: that is
// not fence.ErrStale; roll back and run the transaction again, and the retry is refused. So
// at either level the stored token never goes down and no write with a lower token commits
// after one with a higher token did.
//
// The check guards only the writes of its own transaction: writes made outside it, or in a
// transaction that does not call it, are not fenced.
//
// # Tokens
//
// Tokens are positive and at most MaxToken (the column is a bigint); a token equal to the
// stored one passes (the same holder writing twice). cronlock's tokens of one lock key
// strictly increase (guarantee 3 in docs/guarantees.md), so use one resource per job (its
// name) and fence the writes of runs that do not overlap.
package pgfence
