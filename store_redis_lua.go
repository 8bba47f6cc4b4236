package webhookidempotency

import (
	"errors"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Values stored under a key.
//
// A completed key holds the encoded record (recorder.go), whose first byte
// is the record version. An in-flight key holds inFlightMarker followed by
// the owner token. Anything else is corrupt or foreign: it is logged and
// overwritten by the next claim.
//
// The scripts take the key as KEYS[1] and durations in milliseconds. They
// are written with `$IN_FLIGHT`, `$RECORD_VERSION` and `$RECORD_MIN_LEN`,
// which luaScript replaces with the Go constants, so the Lua and the Go
// side cannot disagree on the layout.

// inFlightMarker starts the value of an in-flight key: a zero byte (no
// record starts with it) and the marker's version, 1.
const inFlightMarker = "\x00\x01"

// luaScript builds a script from its source, with the layout constants
// filled in.
func luaScript(src string) *redis.Script {
	return redis.NewScript(strings.NewReplacer(
		"$IN_FLIGHT", luaQuote(inFlightMarker),
		"$RECORD_VERSION", strconv.Itoa(recordVersion),
		"$RECORD_MIN_LEN", strconv.Itoa(recordFixedLen),
	).Replace(src))
}

// luaQuote writes s as a Lua string literal of decimal escapes.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		b.WriteByte('\\')
		b.WriteString(strconv.Itoa(int(s[i])))
	}
	b.WriteByte('\'')
	return b.String()
}

var (
	// ARGV: owner, lease. The claim of a key that holds something other
	// than a record (see store_redis_claim.go).
	// Returns -1 when claimed, -2 when claimed over a corrupt value, the
	// PTTL (>= 0) of an in-flight key, or the record of a completed key.
	redisClaimScript = luaScript(luaKeyState + `
local r, foreign = keyState(KEYS[1], ARGV[1], ARGV[2])
if r then
	return r
end
redis.call('SET', KEYS[1], $IN_FLIGHT .. ARGV[1], 'PX', ARGV[2])
if foreign then
	return -2
end
return -1
`)

	// ARGV: owner, lease, the corrupt value seen.
	// Claims a key whose value Lua could not tell from a record but Go
	// could not decode, if it still holds that value. Returns 1 when
	// claimed, 0 otherwise.
	redisReclaimScript = luaScript(`
if redis.pcall('GET', KEYS[1]) == ARGV[3] then
	redis.call('SET', KEYS[1], $IN_FLIGHT .. ARGV[1], 'PX', ARGV[2])
	return 1
end
return 0
`)

	// ARGV: owner, record, ttl. Returns 1 when completed (or already
	// completed with this record, a retried call), 0 when not the owner.
	redisCompleteScript = luaScript(`
local v = redis.pcall('GET', KEYS[1])
if v == $IN_FLIGHT .. ARGV[1] then
	redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
	return 1
end
if v == ARGV[2] then
	return 1
end
return 0
`)

	// ARGV: owner. Returns 1 when released, 0 when not the owner.
	redisReleaseScript = luaScript(`
if redis.pcall('GET', KEYS[1]) == $IN_FLIGHT .. ARGV[1] then
	redis.call('DEL', KEYS[1])
	return 1
end
return 0
`)

	// ARGV: owner, lease. Returns 1 when renewed, 0 when not the owner.
	redisRenewScript = luaScript(`
if redis.pcall('GET', KEYS[1]) == $IN_FLIGHT .. ARGV[1] then
	redis.call('PEXPIRE', KEYS[1], ARGV[2])
	return 1
end
return 0
`)

	// KEYS: idempotency key, stream. ARGV: record, ttl, the event's
	// fields and values. Claims the key with the record and appends the
	// event in one step. Returns what redisClaimScript returns for a key
	// in flight or completed, or {id} of the appended event.
	redisClaimAppendScript = luaScript(luaKeyState + `
local r = keyState(KEYS[1], '', 0)
if r then
	return r
end
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {id}
`)
)

// luaKeyState is the Lua every claim starts with: keyState(key, owner,
// lease) returns the record of a completed key, the PTTL of a key in flight
// for another owner, or -1 for a key in flight for this owner (its lease
// renewed); else nil, and true when the key held a corrupt or foreign value.
const luaKeyState = `
local function keyState(key, owner, lease)
	local v = redis.pcall('GET', key)
	if type(v) == 'table' then
		v = '' -- a key of another type: foreign
	end
	if not v then
		return nil, false
	end
	if string.byte(v, 1) == $RECORD_VERSION and string.len(v) > $RECORD_MIN_LEN then
		return v
	end
	if string.sub(v, 1, 2) == $IN_FLIGHT then
		if string.sub(v, 3) == owner then
			redis.call('PEXPIRE', key, lease)
			return -1
		end
		local t = redis.call('PTTL', key)
		if t >= 0 then
			return t
		end
	end
	return nil, true
end
`

// errRedisBreakerOpen is returned while the breaker is open.
var errRedisBreakerOpen = errors.New("redis store unreachable (circuit breaker open)")
