// Package fencedstore is the fenced store of the multi-process tests and the chaos suite
// (internal/chaos): a script on a Redis node that keeps the largest fencing token written per
// job and refuses any token not larger, as storage that rejects stale writers does. The
// testworkers call it from Go and the chaos suite's daemon workers with redis-cli (EVALSHA),
// so both write to one store with one script. The chaos suite can use a Postgres store
// instead (postgres.go): package pgfence's check, which the daemon workers run with psql.
package fencedstore

import "github.com/redis/go-redis/v9"

// Script stores ARGV[1] (a token) in KEYS[1] if it is larger than the number there and
// returns 1, or returns 0; it logs ARGV[2] to KEYS[2] (accepted) or KEYS[3] (refused). Tokens
// are below 2^53, exact in Lua numbers. Its keys are Keys.
var Script = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) > cur then
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('RPUSH', KEYS[2], ARGV[2])
  return 1
end
redis.call('RPUSH', KEYS[3], ARGV[2])
return 0`)

// Keys returns the keys of job's store under prefix: the largest token, the log of accepted
// writes, the log of refused ones.
func Keys(prefix, job string) []string {
	k := prefix + ":" + job
	return []string{k, k + ":accepted", k + ":rejected"}
}

// Answer is the store's answer to a write as the ledger records it: "accepted" or "rejected".
func Answer(ok bool) string {
	if ok {
		return "accepted"
	}
	return "rejected"
}
