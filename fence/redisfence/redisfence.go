package redisfence

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/cronlock/cronlock/fence"
	"github.com/cronlock/cronlock/fence/internal/fencearg"
	"github.com/cronlock/cronlock/internal/hashslot"
)

// Key returns the fence key of resource, "{resource}:fence": it holds the highest token a
// guarded write for resource carried, as a decimal string. Its hash tag is the resource, so
// the data keys of resource must carry the same tag ("{resource}:…") to be in its hash slot.
func Key(resource string) string { return "{" + resource + "}:fence" }

// staleReply starts the error reply of a script that refused a token; the stored token follows.
const staleReply = "CRONLOCK_STALE "

// guard is the check around a body: it takes the fence key and the token off the end of KEYS
// and ARGV (so that the body sees only its own), refuses a token lower than the stored one,
// runs the body, then stores the token. Tokens are compared as decimal strings (length, then
// digits), exact for every uint64, where Lua numbers are exact only below 2^53.
const guard = `local fence = table.remove(KEYS)
local token = table.remove(ARGV)
local stored = redis.call('GET', fence)
if stored and (#stored > #token or (#stored == #token and stored > token)) then
  return redis.error_reply('` + staleReply + `' .. stored)
end
local result = (function()
%s
end)()
if stored ~= token then redis.call('SET', fence, token) end
return result
`

// Script is a Lua write of the caller's that runs under the check: it runs only if its token
// is not lower than the resource's stored one, then stores the token, atomically. It is safe
// for concurrent use.
type Script struct {
	script *redis.Script
}

// NewScript returns the Script that runs body, a Lua script body as redis.NewScript takes
// one (KEYS, ARGV, redis.call, return), under the check. body sees only the keys and
// arguments given to Run. If body fails with an error (a redis.call that failed), the token is
// not stored; writes body made before the error stay, as in any Redis script.
func NewScript(body string) *Script {
	return &Script{script: redis.NewScript(fmt.Sprintf(guard, body))}
}

// Run runs the script on rdb for resource with token, keys and args, and returns the body's
// result. If the store holds a higher token for resource, nothing is written and the error is
// a *fence.StaleError (matching fence.ErrStale). A token equal to the stored one passes (the
// same holder writing again). Every key must be in the hash slot of Key(resource) — carry the
// tag "{resource}" — so that the script runs on one node of a Redis Cluster.
//
// Bad arguments (a nil rdb, an empty resource or one with braces, token 0, a key in another
// hash slot) return an error that says which and how to fix it, and nothing is run.
func (s *Script) Run(ctx context.Context, rdb redis.Scripter, resource string, token uint64, keys []string, args ...any) (any, error) {
	if fencearg.Nil(rdb) {
		return nil, errors.New("fence: rdb is nil: pass the Redis client of the data (*redis.Client, *redis.ClusterClient…)")
	}
	if err := fencearg.Check(resource, token, math.MaxUint64); err != nil {
		return nil, err
	}
	if strings.ContainsAny(resource, "{}") {
		return nil, fmt.Errorf("fence: resource %q has a brace: it is the hash tag of the fence key %q, name it without { or }", resource, Key(resource))
	}
	fenceKey := Key(resource)
	slot := hashslot.Of(fenceKey)
	for _, k := range keys {
		if hashslot.Of(k) != slot {
			return nil, fmt.Errorf("fence: key %q is not in the hash slot of the fence key %q: name it with the tag {%s}, e.g. \"{%s}:%s\"", k, fenceKey, resource, resource, k)
		}
	}
	tok := strconv.FormatUint(token, 10)
	res, err := s.script.Run(ctx, rdb, append(keys[:len(keys):len(keys)], fenceKey), append(args[:len(args):len(args)], tok)...).Result()
	if err != nil {
		if rest, ok := strings.CutPrefix(err.Error(), staleReply); ok {
			if stored, perr := strconv.ParseUint(rest, 10, 64); perr == nil {
				return nil, &fence.StaleError{Resource: resource, Token: token, Stored: stored}
			}
		}
		if errors.Is(err, redis.Nil) {
			return nil, nil
		}
		return nil, fmt.Errorf("fence: guarded write of resource %q with token %d: %w", resource, token, err)
	}
	return res, nil
}

var (
	setScript = NewScript(`if ARGV[2] ~= '0' then return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
return redis.call('SET', KEYS[1], ARGV[1])`)
	hsetScript = NewScript(`return redis.call('HSET', KEYS[1], unpack(ARGV))`)
	delScript  = NewScript(`return redis.call('DEL', unpack(KEYS))`)
)

// Set is SET key value [PX expiration] under the check: it sets key unless the store holds a
// higher token for resource (then the error matches fence.ErrStale and key is untouched).
// expiration 0 means no expiry; it is rounded down to milliseconds. Script.Run says the rest.
func Set(ctx context.Context, rdb redis.Scripter, resource string, token uint64, key string, value any, expiration time.Duration) error {
	if expiration < 0 || (expiration > 0 && expiration < time.Millisecond) {
		return fmt.Errorf("fence: expiration %v of key %q: give 0 (no expiry) or at least 1ms", expiration, key)
	}
	_, err := setScript.Run(ctx, rdb, resource, token, []string{key}, value, expiration.Milliseconds())
	return err
}

// HSet is HSET key field value [field value …] under the check (values are field, value
// pairs). Script.Run says the rest.
func HSet(ctx context.Context, rdb redis.Scripter, resource string, token uint64, key string, values ...any) error {
	if len(values) == 0 || len(values)%2 != 0 {
		return fmt.Errorf("fence: HSet of key %q got %d values: give field, value pairs", key, len(values))
	}
	_, err := hsetScript.Run(ctx, rdb, resource, token, []string{key}, values...)
	return err
}

// Del is DEL key [key …] under the check, and returns how many keys it removed. Script.Run says
// the rest.
func Del(ctx context.Context, rdb redis.Scripter, resource string, token uint64, keys ...string) (int64, error) {
	if len(keys) == 0 {
		return 0, errors.New("fence: Del got no keys: give the keys to delete")
	}
	n, err := delScript.Run(ctx, rdb, resource, token, keys)
	if err != nil {
		return 0, err
	}
	return n.(int64), nil
}
