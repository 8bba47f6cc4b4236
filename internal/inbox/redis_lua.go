package inbox

import (
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The scripts of the redis store's queue. Each runs on one partition's
// keys, passed in this order (partKeys; KEYS[1] to KEYS[8]):
//
//	inbox   stream + consumer group: what may be delivered now (an event
//	        without a group, or the head of its group) and what waits in
//	        the retry set
//	retry   sorted set: scheduled retries by due time
//	dead    stream: dead letters
//	held    stream: events waiting behind the head of their group
//	order   sorted set, every score 0: `<group>\0<held id>` (the id padded
//	        so that members sort as ids do), the held events of each group
//	        in acceptance order, read with ZRANGEBYLEX
//	heads   hash: group -> the stream id of its head, while the group has
//	        an event pending
//	groups  sorted set: group -> the time its head was accepted (unix ms),
//	        the groups with an event pending, longest waiting first
//	answering  stream: events whose first attempt the accepting worker
//	        makes (respond app within), each with a member `a:<id>` in the
//	        retry set, due when another worker is to take it over (or its
//	        retry is due, once that attempt failed)
//
// A group is one field of heads and of groups and one member of order per
// held event: nothing of it is left once its last event is delivered or
// dead-lettered (docs/inbox.md#order).

// partKeys is the number of keys of a partition.
const partKeys = 8

// Field names a queue adds to a stream entry.
const (
	fieldGroup       = "group"        // the event's group value (order_by)
	fieldOrderBroken = "order_broken" // the id of the dead letter before it in its group
	fieldNewer       = "newer"        // the event's newer_than value
	fieldFanout      = "fanout"       // the number of destinations it went to, when more than one
)

// answeringPrefix starts the retry-set member of an event in the
// answering stream.
const answeringPrefix = "a:"

// luaQueue is the Lua every queue script shares.
//
// fields(entry, skip) copies a stream entry's field list without the
// fields named in skip; add appends values; field reads one.
//
// admit(K, fields, group, answer) stores an event in the partition K: into
// the stream when it has no group or its group has nothing pending (it
// becomes the head), else into held, behind the group's events; with
// answer (a due time, ms) not empty, into the answering stream rather than
// the stream, due for another worker at answer. It returns the id and
// where it went: 's' stream, 'h' held, 'a' answering. admitTo(keys, group,
// fields, follow, answer) admits it to the first partition of keys
// (partKeys each) whose heads hold the group, else, unless follow, to the
// first: a group pending in a partition of another layout stays there
// until it has drained (docs/inbox.md#partitions); it returns the id,
// where it went and the partition's place in keys.
//
// unanswer(K, id) deletes an event from the answering stream, and the
// stream once empty.
//
// release(K, group, id, broken) hands the group of id, its head that has
// just left the stream, to its next held event, which is moved into the
// stream (with `order_broken` set to broken, unless empty); with none held
// the group is forgotten.
var luaQueue = `
local function fields(f, skip)
	local out = {}
	for i = 1, #f, 2 do
		if not skip[f[i]] then
			out[#out+1] = f[i]
			out[#out+1] = f[i+1]
		end
	end
	return out
end
local function add(out, ...)
	local a = {...}
	for i = 1, #a do out[#out+1] = a[i] end
	return out
end
local function field(f, name)
	for i = 1, #f, 2 do
		if f[i] == name then return f[i+1] end
	end
	return nil
end
local function pad(id)
	local ms, seq = string.match(id, '^(%d+)-(%d+)$')
	return string.rep('0', 20 - #ms) .. ms .. '-' .. string.rep('0', 20 - #seq) .. seq
end
local function unpad(p)
	local ms, seq = string.match(p, '^0*(%d+)-0*(%d+)$')
	return ms .. '-' .. seq
end
local PK = ` + strconv.Itoa(partKeys) + `
local function part(keys, p)
	local K = {}
	for i = 1, PK do K[i] = keys[(p-1)*PK + i] end
	return K
end
local function admit(K, f, group, answer)
	if group ~= '' and redis.call('HEXISTS', K[6], group) == 1 then
		local id = redis.call('XADD', K[4], '*', unpack(f))
		redis.call('ZADD', K[5], 0, group .. '\0' .. pad(id))
		return id, 'h'
	end
	local id, where
	if answer and answer ~= '' then
		id, where = redis.call('XADD', K[8], '*', unpack(f)), 'a'
		redis.call('ZADD', K[2], answer, '` + answeringPrefix + `' .. id .. '\n0\n0\n')
	else
		id, where = redis.call('XADD', K[1], '*', unpack(f)), 's'
	end
	if group ~= '' then
		redis.call('HSET', K[6], group, id)
		redis.call('ZADD', K[7], tonumber(field(f, 'received')) or 0, group)
	end
	return id, where
end
local function admitTo(keys, group, f, follow, answer)
	if group ~= '' then
		for p = 1, #keys / PK do
			local K = part(keys, p)
			if redis.call('HEXISTS', K[6], group) == 1 then
				local id, where = admit(K, f, group, answer)
				return id, where, p
			end
		end
	end
	if follow then
		return false
	end
	local id, where = admit(part(keys, 1), f, group, answer)
	return id, where, 1
end
local function unanswer(K, id)
	redis.call('XDEL', K[8], id)
	if redis.call('XLEN', K[8]) == 0 then
		redis.call('DEL', K[8]) -- a stream stays when emptied
	end
end
local function release(K, group, id, broken)
	if not group or group == '' or redis.call('HGET', K[6], group) ~= id then
		return
	end
	while true do
		local m = redis.call('ZRANGEBYLEX', K[5], '[' .. group .. '\0', '(' .. group .. '\1', 'LIMIT', 0, 1)[1]
		if not m then
			redis.call('HDEL', K[6], group)
			redis.call('ZREM', K[7], group)
			return
		end
		redis.call('ZREM', K[5], m)
		local held = unpad(string.sub(m, #group + 2))
		local e = redis.call('XRANGE', K[4], held, held)[1]
		if e then
			local f = fields(e[2], {order_broken = true})
			if broken ~= '' then
				add(f, 'order_broken', broken)
			end
			local nid = redis.call('XADD', K[1], '*', unpack(f))
			redis.call('XDEL', K[4], held)
			if redis.call('XLEN', K[4]) == 0 then
				redis.call('DEL', K[4]) -- a stream stays when emptied
			end
			redis.call('HSET', K[6], group, nid)
			redis.call('ZADD', K[7], tonumber(field(f, 'received')) or 0, group)
			return
		end
	end
end
`

// deadIDStride spaces the sequence numbers of dead-letter ids: a dead
// letter of the partition with index i has a sequence number k*stride+i,
// so no two partitions of a source give one id twice and the admin API
// finds a dead letter by its id alone. Indexes are below maxPartitions+1.
const deadIDStride = 128

// acceptLua is the append step of an accepted event (redisstore's
// AppendScript), to one destination's queue or more. keys: each
// destination's partitions, one after the other. args: the number of
// destinations, then for each its group, its number of partitions and
// answer (admit). Returns `<id> <where> <partition>` of each destination,
// joined by commas.
var acceptLua = luaQueue + `
local function append(keys, args, f)
	local out, k, a = {}, 0, 2
	for i = 1, tonumber(args[1]) do
		local group, n, answer = args[a], tonumber(args[a+1]), args[a+2]
		a = a + 3
		local dk = {}
		for j = 1, n * PK do dk[j] = keys[k + j] end
		k = k + n * PK
		local g = f
		if group ~= '' then
			g = add(fields(f, {}), 'group', group)
		end
		local id, where, p = admitTo(dk, group, g, false, answer)
		out[#out+1] = id .. ' ' .. where .. ' ' .. p
	end
	return table.concat(out, ',')
end
`

var (
	// The accept of an event (redisstore.Streams' ClaimAndAppend, on one
	// node), and of the items of one request in one round trip
	// (ClaimAndAppendBatch).
	acceptScript      = redisstore.NewAppendScript(acceptLua)
	acceptBatchScript = redisstore.NewAppendBatchScript(acceptLua)

	// KEYS: the keys of one or more partitions. ARGV: group, 'follow' or
	// '', answer (admit), the event's fields and values. Admits the event
	// (admitTo); returns `<id> <where>`, or false when follow and no
	// partition holds the group.
	appendScript = redis.NewScript(luaQueue + `
local f = {}
for i = 4, #ARGV do f[#f+1] = ARGV[i] end
local id, where = admitTo(KEYS, ARGV[1], f, ARGV[2] == 'follow', ARGV[3])
if not id then
	return false
end
return id .. ' ' .. where
`)

	// KEYS: the keys of one or more partitions. ARGV: consumer group, id,
	// the event's group. Withdraws an event accepted by a write too few
	// replicas acknowledged (docs/inbox.md#failover), unless a reader has
	// taken it: from held (behind the head of its group), or from the
	// stream when its id is past what the consumer group has read (a head
	// hands its group on). Returns 1 when withdrawn, else 0.
	withdrawScript = redis.NewScript(luaQueue + `
local function before(a, b)
	local am, as = string.match(a, '^(%d+)-(%d+)$')
	local bm, bs = string.match(b, '^(%d+)-(%d+)$')
	am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
	return am < bm or (am == bm and as < bs)
end
local id, grp = ARGV[2], ARGV[3]
for p = 1, #KEYS / PK do
	local K = part(KEYS, p)
	if #redis.call('XRANGE', K[8], id, id) > 0 then
		unanswer(K, id)
		redis.call('ZREM', K[2], '` + answeringPrefix + `' .. id .. '\n0\n0\n')
		release(K, grp, id, '')
		return 1
	end
	if grp ~= '' and #redis.call('XRANGE', K[4], id, id) > 0 then
		redis.call('XDEL', K[4], id)
		redis.call('ZREM', K[5], grp .. '\0' .. pad(id))
		if redis.call('XLEN', K[4]) == 0 then
			redis.call('DEL', K[4])
		end
		return 1
	end
	if #redis.call('XRANGE', K[1], id, id) > 0 then
		local read = '0-0'
		local groups = redis.pcall('XINFO', 'GROUPS', K[1])
		if type(groups) == 'table' and not groups.err then
			for _, g in ipairs(groups) do
				local name, last
				for i = 1, #g, 2 do
					if g[i] == 'name' then name = g[i+1] elseif g[i] == 'last-delivered-id' then last = g[i+1] end
				end
				if name == ARGV[1] and last then read = last end
			end
		end
		if not before(read, id) then
			return 0
		end
		redis.call('XDEL', K[1], id)
		release(K, grp, id, '')
		return 1
	end
end
return 0
`)

	// KEYS: a partition, the group's newest-value key (any key of the
	// partition when none) [, idempotency key [, its guard]]. ARGV:
	// consumer group, id, ttl (ms, 0 to leave it), the event's group,
	// newest value ('' for none), its ttl (ms), record ('' for none), the
	// retry-set member of an event in the answering stream ('' for one in
	// the stream). A delivered event leaves its stream; its key's record
	// is replaced (its guard's too), keeping its expiry unless ttl, and
	// its key is kept for ttl; its group's newest value is set; its group
	// goes on.
	ackScript = redis.NewScript(luaQueue + `
local id = ARGV[2]
if ARGV[8] ~= '' then
	redis.call('ZREM', KEYS[2], ARGV[8])
	unanswer(KEYS, id)
else
	redis.call('XACK', KEYS[1], ARGV[1], id)
	redis.call('XDEL', KEYS[1], id)
end
for i = PK + 2, #KEYS do
	local ttl = ARGV[3]
	if i > PK + 2 or ttl == '0' then
		ttl = redis.call('PTTL', KEYS[i])
	end
	if ARGV[7] ~= '' and tonumber(ttl) > 0 then
		redis.call('SET', KEYS[i], ARGV[7], 'PX', ttl, 'XX')
	elseif i == PK + 2 and ARGV[3] ~= '0' then
		redis.call('PEXPIRE', KEYS[i], ARGV[3])
	end
end
if ARGV[5] ~= '' then
	redis.call('SET', KEYS[PK + 1], ARGV[5], 'PX', ARGV[6])
end
release(KEYS, ARGV[4], id, '')
return 1
`)

	// KEYS: a key holding a record. ARGV: record, ttl (ms, 0 to keep its
	// expiry). Replaces the record of a key that holds one (the
	// application's answer, on Redis Cluster where the key is on another
	// slot than the event).
	recordScript = redis.NewScript(`
local ttl = ARGV[2]
if ttl == '0' then
	ttl = redis.call('PTTL', KEYS[1])
end
if tonumber(ttl) > 0 then
	redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl, 'XX')
end
return 1
`)

	// KEYS: stream, retry set. ARGV: group, id, due (ms), member, the
	// member it replaces ('' for an event of the stream). An event of the
	// stream stays there, acknowledged, until it is due; one of the
	// answering stream stays there; a head stays the head of its group.
	scheduleScript = redis.NewScript(`
if ARGV[5] ~= '' then
	redis.call('ZREM', KEYS[2], ARGV[5])
	redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
	return 1
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
`)

	// KEYS: a partition. ARGV: now (ms), limit. Moves due events back into
	// the stream as new entries carrying their attempt count, those of the
	// answering stream too (an attempt at acceptance whose worker died
	// counts as made); a head stays its group's head under its new id.
	moveScript = redis.NewScript(luaQueue + `
local skip = {attempts = true, last_status = true, last_error = true}
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(due) do
	local id, attempts, status, err = string.match(m, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
	if id then
		local src = KEYS[1]
		if string.sub(id, 1, ` + strconv.Itoa(len(answeringPrefix)) + `) == '` + answeringPrefix + `' then
			id, src = string.sub(id, ` + strconv.Itoa(len(answeringPrefix)+1) + `), KEYS[8]
			if attempts == '0' then
				attempts, err = '1', 'the attempt made at acceptance has no recorded outcome: its worker stopped'
			end
		end
		local e = redis.call('XRANGE', src, id, id)
		if e[1] then
			local out = add(fields(e[1][2], skip), 'attempts', attempts, 'last_status', status, 'last_error', err)
			local nid = redis.call('XADD', KEYS[1], '*', unpack(out))
			if src == KEYS[8] then
				unanswer(KEYS, id)
			else
				redis.call('XDEL', src, id)
			end
			local group = field(out, 'group')
			if group and group ~= '' and redis.call('HGET', KEYS[6], group) == id then
				redis.call('HSET', KEYS[6], group, nid)
			end
		end
	end
	redis.call('ZREM', KEYS[2], m)
end
return #due
`)

	// KEYS: a partition. ARGV: consumer group, id, attempts, status,
	// error, failed (ms), the partition's index, the retry-set member of
	// an event in the answering stream ('' for one in the stream). Moves
	// an event to the dead-letter stream under an id of this partition's
	// (deadIDStride); its group goes on, the next event carrying the dead
	// letter's id. Returns the dead letter's id, '' when the event was
	// gone.
	deadScript = redis.NewScript(luaQueue + `
local skip = {attempts = true, last_status = true, last_error = true, failed = true}
local src = KEYS[1]
if ARGV[8] ~= '' then
	src = KEYS[8]
end
local e = redis.call('XRANGE', src, ARGV[2], ARGV[2])
local did = ''
if e[1] then
	local out = add(fields(e[1][2], skip), 'attempts', ARGV[3], 'last_status', ARGV[4], 'last_error', ARGV[5], 'failed', ARGV[6])
	local stride, index = ` + strconv.Itoa(deadIDStride) + `, tonumber(ARGV[7])
	local t = redis.call('TIME')
	local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	local seq = index
	local last = redis.call('XREVRANGE', KEYS[3], '+', '-', 'COUNT', 1)[1]
	if last then
		local lms, lseq = string.match(last[1], '^(%d+)-(%d+)$')
		lms, lseq = tonumber(lms), tonumber(lseq)
		if lms >= ms then
			ms, seq = lms, (math.floor(lseq / stride) + 1) * stride + index
		end
	end
	for _ = 1, 64 do
		local id = string.format('%d-%d', ms, seq)
		local ok = redis.pcall('XADD', KEYS[3], id, unpack(out))
		if type(ok) == 'string' then
			did = ok
			break
		end
		seq = seq + stride
	end
	if did == '' then
		did = redis.call('XADD', KEYS[3], '*', unpack(out))
	end
	release(KEYS, field(e[1][2], 'group'), ARGV[2], did)
end
if ARGV[8] ~= '' then
	redis.call('ZREM', KEYS[2], ARGV[8])
	unanswer(KEYS, ARGV[2])
else
	redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
	redis.call('XDEL', KEYS[1], ARGV[2])
end
return did
`)

	// KEYS: a dead-letter stream, then the keys of one or more partitions.
	// ARGV: id. Moves a dead letter back into the queue (admitTo, behind
	// its group's pending events) with a fresh retry schedule; returns its
	// new id, or false when there is no such dead letter.
	redeliverScript = redis.NewScript(luaQueue + `
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])[1]
if not e then
	return false
end
local f = e[2]
local out = add(fields(f, {base = true, failed = true, order_broken = true}), 'base', field(f, 'attempts') or '0')
local keys = {}
for i = 2, #KEYS do keys[#keys+1] = KEYS[i] end
local id = admitTo(keys, field(f, 'group') or '', out, false, '')
redis.call('XDEL', KEYS[1], ARGV[1])
return id
`)

	// KEYS: a partition. ARGV: count. The longest-waiting groups, up to
	// count, each {group, since (ms), head id, held, state, due (ms),
	// attempts, last status, last error}, state being 'delivering'
	// (pending in the consumer group), 'scheduled' (waiting in the retry
	// set) or 'ready'; then the number of groups and of held events.
	groupsScript = redis.NewScript(luaQueue + `
local out = {}
local gs = redis.call('ZRANGE', KEYS[7], 0, tonumber(ARGV[1]) - 1, 'WITHSCORES')
local retries = nil
for i = 1, #gs, 2 do
	local g = gs[i]
	local id = redis.call('HGET', KEYS[6], g) or ''
	local held = redis.call('ZLEXCOUNT', KEYS[5], '[' .. g .. '\0', '(' .. g .. '\1')
	local state, due, attempts, status, err = 'ready', 0, '0', '0', ''
	local e = redis.call('XRANGE', KEYS[1], id, id)[1]
	local answering = false
	if not e then
		e = redis.call('XRANGE', KEYS[8], id, id)[1]
		answering = e ~= nil
	end
	if e then
		attempts, status, err = field(e[2], 'attempts') or '0', field(e[2], 'last_status') or '0', field(e[2], 'last_error') or ''
	end
	local p = nil
	if not answering then
		p = redis.pcall('XPENDING', KEYS[1], 'webhook_idempotency', id, id, 1)
	end
	if type(p) == 'table' and p[1] then
		state = 'delivering'
	else
		if not retries then
			retries = {}
			local r = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
			for j = 1, #r, 2 do
				local rid, a, st, er = string.match(r[j], '^([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
				if rid then retries[rid] = {r[j+1], a, st, er} end
			end
		end
		local r = retries[id]
		if answering then
			r = retries['` + answeringPrefix + `' .. id]
		end
		if r and answering and r[2] == '0' then
			state = 'delivering' -- its attempt at acceptance
		elseif r then
			state, due, attempts, status, err = 'scheduled', r[1], r[2], r[3], r[4]
		end
	end
	out[#out+1] = {g, gs[i+1], id, held, state, due, attempts, status, err}
end
return {redis.call('ZCARD', KEYS[7]), redis.call('XLEN', KEYS[4]), out}
`)

	// KEYS: the source's rate hash. ARGV: 'reserve', 'slow' or 'read',
	// the interval at the full rate, slowEvery, slowStep (microseconds),
	// maxSlowLevel, the number of moments to reserve. The GCRA of rate.go
	// on Redis's clock: reserve returns {the wait for the first moment,
	// level, the step to each next one}, slow {0, level, 0}, read {tat,
	// level, at, now} (microseconds). The hash expires once it no longer
	// matters.
	rateScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local s = redis.call('HMGET', KEYS[1], 'tat', 'level', 'at')
local tat, level, at = tonumber(s[1]) or 0, tonumber(s[2]) or 0, tonumber(s[3]) or 0
local iv, every, step, maxl = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
if level > 0 then
	local steps = math.floor((now - at) / step)
	if steps >= level then
		level, at = 0, now
	elseif steps > 0 then
		level, at = level - steps, at + steps * step
	end
end
if ARGV[1] == 'read' then
	return {string.format('%d', tat), level, string.format('%d', at), string.format('%d', now)}
end
local wait, step = 0, 0
if ARGV[1] == 'reserve' then
	local start = math.max(tat, now)
	step = iv * 2 ^ level
	tat = start + step * tonumber(ARGV[6])
	wait = start - now
elseif level == 0 or now - at >= every then
	level, at = math.min(level + 1, maxl), now
end
redis.call('HSET', KEYS[1], 'tat', string.format('%d', tat), 'level', level, 'at', string.format('%d', at))
redis.call('PEXPIRE', KEYS[1], math.floor((math.max(tat - now, 0) + (level + 1) * step) / 1000) + 1000)
return {wait, level, step}
`)
)
