package redisstore

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Values stored under a key.
//
// A note (the replay guard's `flag` mode) holds the store key of the first
// delivery that noted it.
//
// A completed key holds the encoded record (recorder.go), whose first byte
// is the record version. An in-flight key holds inFlightMarker followed by
// the owner token. Anything else is corrupt or foreign: it is logged and
// overwritten by the next claim.
//
// The scripts take the key as KEYS[1] and durations in milliseconds; the
// claim, completion, release and renewal scripts take the key's guard as
// KEYS[2] when it has one (guard.go), and act on both, answering for the
// key. They are written with `$IN_FLIGHT`, `$RECORD_VERSION` and `$RECORD_MIN_LEN`,
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
		"$RECORD_VERSION", strconv.Itoa(record.Version),
		"$RECORD_MIN_LEN", strconv.Itoa(record.FixedLen),
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
	// ARGV: owner, lease. The claim of a key and its guard, or of a key
	// that holds something other than a record (see store_redis_claim.go).
	// Claims every key when none is taken. Returns -1 when claimed, -2
	// when claimed over a corrupt value, or, for the first key taken and
	// claiming none, the PTTL (>= 0) of a key in flight or the record of a
	// completed key.
	redisClaimScript = luaScript(luaKeyState + `
local mine, foreign = 0, false
for i = 1, #KEYS do
	local r, f = keyState(KEYS[i], ARGV[1], ARGV[2])
	if r == -1 then
		mine = mine + 1
	elseif r then
		return r
	end
	foreign = foreign or f
end
if mine < #KEYS then
	for i = 1, #KEYS do
		redis.call('SET', KEYS[i], $IN_FLIGHT .. ARGV[1], 'PX', ARGV[2])
	end
end
if foreign then
	return -2
end
return -1
`)

	// ARGV: owner, lease, the corrupt value seen.
	// Claims keys, one of which held a value Lua could not tell from a
	// record but Go could not decode, if each still holds that value or
	// nothing. Returns 1 when claimed, 0 otherwise.
	redisReclaimScript = luaScript(`
for i = 1, #KEYS do
	local v = redis.pcall('GET', KEYS[i])
	if v and v ~= ARGV[3] then
		return 0
	end
end
for i = 1, #KEYS do
	redis.call('SET', KEYS[i], $IN_FLIGHT .. ARGV[1], 'PX', ARGV[2])
end
return 1
`)

	// ARGV: owner, record, ttl. Completes every key the owner holds.
	// Returns 1 when the first key is completed (or already completed with
	// this record, a retried call), 0 when it is not the owner's.
	redisCompleteScript = luaScript(`
local done = 0
for i = 1, #KEYS do
	local v = redis.pcall('GET', KEYS[i])
	if v == $IN_FLIGHT .. ARGV[1] then
		redis.call('SET', KEYS[i], ARGV[2], 'PX', ARGV[3])
		if i == 1 then done = 1 end
	elseif i == 1 and v == ARGV[2] then
		done = 1
	end
end
return done
`)

	// ARGV: owner. Releases every key the owner holds. Returns 1 when the
	// first key is released, 0 when it is not the owner's.
	redisReleaseScript = luaScript(luaOwnedKeys(`redis.call('DEL', KEYS[i])`))

	// ARGV: owner, lease. Renews every key the owner holds. Returns 1 when
	// the first key is renewed, 0 when it is not the owner's.
	redisRenewScript = luaScript(luaOwnedKeys(`redis.call('PEXPIRE', KEYS[i], ARGV[2])`))

	// KEYS: key, note. ARGV: owner, lease, note ttl. Claims the key as
	// redisClaimScript does and reads the note, taking it for the key
	// when it holds nothing. Returns {the claim's reply, the note's value
	// or ''}.
	redisClaimNotedScript = luaScript(luaKeyState + luaNote + `
local r, f = keyState(KEYS[1], ARGV[1], ARGV[2])
local prev = note(KEYS[2], KEYS[1], ARGV[3])
if r then
	return {r, prev}
end
redis.call('SET', KEYS[1], $IN_FLIGHT .. ARGV[1], 'PX', ARGV[2])
if f then
	return {-2, prev}
end
return {-1, prev}
`)

	// KEYS: note. ARGV: key, note ttl. The note of redisClaimNotedScript,
	// alone (its key on another Cluster slot). Returns the note's value or
	// ''.
	redisNoteScript = luaScript(luaNote + `
return note(KEYS[1], ARGV[1], ARGV[2])
`)
)

// redisClaimAppendLua is the body of an AppendScript, after the caller's
// append function. KEYS: idempotency key[, guard or note], the append's
// keys. ARGV: record, ttl, 'g' (KEYS[2] is a guard), 'n' (a note) or
// empty, the note's ttl, the number of the append's args, its args, the event's
// fields and values. Claims the key (and its guard) with the record and
// appends the event in one step; a note that holds another key is added to
// the event as its `suspected` field. Returns what redisClaimScript returns
// for a key in flight or completed, or {the append's id, the note's value
// (empty for none)}.
const redisClaimAppendLua = `
local first = 2
if ARGV[3] ~= '' then first = 3 end
local r = keyState(KEYS[1], '', 0)
if r then
	return r
end
if ARGV[3] == 'g' then
	r = keyState(KEYS[2], '', 0)
	if r then
		return r
	end
end
local nargs = tonumber(ARGV[5])
local keys, args, entry = {}, {}, {}
for i = first, #KEYS do keys[#keys+1] = KEYS[i] end
for i = 6, 5 + nargs do args[#args+1] = ARGV[i] end
for i = 6 + nargs, #ARGV do entry[#entry+1] = ARGV[i] end
local prev = ''
if ARGV[3] == 'n' then
	prev = note(KEYS[2], KEYS[1], ARGV[4])
	if prev ~= '' and prev ~= KEYS[1] then
		entry[#entry+1] = 'suspected'
		entry[#entry+1] = prev
	end
end
local id = append(keys, args, entry)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
if ARGV[3] == 'g' then
	redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
end
return {id, prev}
`

// redisClaimAppendBatchLua is the body of an AppendBatchScript, after the
// caller's append function: ClaimAndAppend for each item of a request, in
// order. ARGV: ttl (ms), the number of items, then for each its number of
// append keys, of args and of event fields, its record, its args and its
// event fields. KEYS: for each item its key, then its append keys.
// Returns a reply per item: {id} for an item whose key was absent (its
// event appended and the key completed), else keyState's.
const redisClaimAppendBatchLua = `
local ttl, k, a, out = ARGV[1], 1, 3, {}
for i = 1, tonumber(ARGV[2]) do
	local nk, na, ne, rec = tonumber(ARGV[a]), tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), ARGV[a+3]
	a = a + 4
	local key, keys, args, entry = KEYS[k], {}, {}, {}
	for j = 1, nk do keys[j] = KEYS[k + j] end
	k = k + 1 + nk
	for j = 1, na do args[j] = ARGV[a + j - 1] end
	a = a + na
	for j = 1, ne do entry[j] = ARGV[a + j - 1] end
	a = a + ne
	local r = keyState(key, '', 0)
	if r then
		out[i] = r
	else
		out[i] = {append(keys, args, entry)}
		redis.call('SET', key, rec, 'PX', ttl)
	end
end
return out
`

// luaNote is the Lua of a note: note(key, value, ttl) returns the value
// key holds, or takes key for value, kept for ttl, and returns ”. A value
// of another type counts as none and is replaced.
const luaNote = `
local function note(key, value, ttl)
	local v = redis.pcall('GET', key)
	if type(v) == 'string' then
		return v
	end
	redis.call('SET', key, value, 'PX', ttl)
	return ''
end
`

// luaOwnedKeys is the Lua of a script that runs call on every key the
// owner (ARGV[1]) holds in flight, KEYS[i], and returns 1 when the first
// key is one of them, else 0.
func luaOwnedKeys(call string) string {
	return `
local done = 0
for i = 1, #KEYS do
	if redis.pcall('GET', KEYS[i]) == $IN_FLIGHT .. ARGV[1] then
		` + call + `
		if i == 1 then done = 1 end
	end
end
return done
`
}

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

// keyStateResult reads the reply of luaKeyState for a key this caller did
// not claim: a decodable record, or the PTTL of a key in flight.
func keyStateResult(v any) (store.ClaimResult, bool) {
	switch v := v.(type) {
	case int64:
		if v >= 0 {
			return store.ClaimResult{State: store.StateInFlight, LeaseLeft: time.Duration(v) * time.Millisecond}, true
		}
	case string:
		rec := []byte(v)
		if _, err := record.Decode(rec); err == nil {
			return store.ClaimResult{State: store.StateCompleted, Record: rec}, true
		}
	}
	return store.ClaimResult{}, false
}

// errRedisBreakerOpen is returned while the breaker is open.
var errRedisBreakerOpen = errors.New("redis store unreachable (circuit breaker open)")
