package inbox

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The redis store's control state and routes, under the source's tag
// `{<prefix>:<source>}`, which every instance on the Redis reads:
//
//	:control           hash: `paused` (the source) and `paused:<id>` (a
//	                   destination), "1" while paused
//	:breaker:<id>      hash: a destination's breaker (breakerCell's fields)
//	:destinations      hash: route id -> URL, the routes of the source in
//	                   every configuration that ran (destination.go)

// redisControl is a destination's control state on Redis.
type redisControl struct {
	q       *redisQueue
	control string // the source's control hash
	breaker string // the destination's breaker hash
	field   string // the destination's field in control
}

func (q *redisQueue) control() control {
	tag := q.streams.SourceTag(q.source, "")
	return &redisControl{q: q, control: tag + ":control", breaker: tag + ":breaker:" + q.destID, field: "paused:" + q.destID}
}

func (c *redisControl) read(ctx context.Context, b *Breaker) (controlState, error) {
	ctx, cancel := c.q.call(ctx)
	defer cancel()
	var st controlState
	if b == nil {
		v, err := c.q.client.HMGet(ctx, c.control, "paused", c.field).Result()
		if err != nil {
			return controlState{}, err
		}
		st.sourcePaused, st.paused = len(v) == 2 && v[0] != nil, len(v) == 2 && v[1] != nil
		return st, nil
	}
	v, err := c.run(ctx, *b, "read", "", 0, false)
	if err != nil {
		return controlState{}, err
	}
	cell, err := breakerReply(v)
	if err != nil {
		return controlState{}, err
	}
	st.breaker = cell.view(*b)
	st.sourcePaused, st.paused = len(v) == 9 && v[7] == int64(1), len(v) == 9 && v[8] == int64(1)
	return st, nil
}

func (c *redisControl) setPaused(ctx context.Context, source, paused bool) error {
	ctx, cancel := c.q.call(ctx)
	defer cancel()
	field := c.field
	if source {
		field = "paused"
	}
	if paused {
		return c.q.client.HSet(ctx, c.control, field, "1").Err()
	}
	return c.q.client.HDel(ctx, c.control, field).Err()
}

func (c *redisControl) record(ctx context.Context, b Breaker, failed, probe bool) (BreakerState, error) {
	ctx, cancel := c.q.call(ctx)
	defer cancel()
	op := "ok"
	if failed {
		op = "fail"
	}
	v, err := c.run(ctx, b, op, "", 0, probe)
	if err != nil {
		return BreakerState{}, err
	}
	cell, err := breakerReply(v)
	if err != nil {
		return BreakerState{}, err
	}
	return cell.view(b), nil
}

// run runs the breaker script.
func (c *redisControl) run(ctx context.Context, b Breaker, op, owner string, lease time.Duration, probe bool) ([]any, error) {
	flag := 0
	if probe {
		flag = 1
	}
	return redisBreakerScript.Run(ctx, c.q.client, []string{c.breaker, c.control}, op, b.Percent, b.Of,
		b.Cooldown.Milliseconds(), owner, lease.Milliseconds(), flag, c.field).Slice()
}

func (c *redisControl) probe(ctx context.Context, b Breaker, owner string, lease time.Duration) (bool, error) {
	ctx, cancel := c.q.call(ctx)
	defer cancel()
	v, err := c.run(ctx, b, "probe", owner, lease, false)
	if err != nil {
		return false, err
	}
	cell, err := breakerReply(v)
	if err != nil {
		return false, err
	}
	return cell.state == breakerProbing && cell.probeOwner == owner, nil
}

// breakerReply reads the breaker script's reply: the cell's fields.
func breakerReply(v []any) (breakerCell, error) {
	if len(v) < 7 {
		return breakerCell{}, errors.New("breaker: unexpected reply")
	}
	num := func(i int) int64 {
		if n, ok := v[i].(int64); ok {
			return n
		}
		n, _ := strconv.ParseInt(str(v[i]), 10, 64)
		return n
	}
	return breakerCell{state: str(v[0]), window: str(v[1]), opened: num(2), cooldown: num(3), probeAt: num(4),
		probeOwner: str(v[5]), probeUntil: num(6)}, nil
}

// redisBreakerScript is breakerCell on Redis's clock. KEYS: the breaker
// hash, the control hash. ARGV: 'ok', 'fail', 'probe' or 'read', percent,
// of, cooldown (ms), owner, lease (ms), probe (1 for the probe's outcome),
// the destination's field in control. Returns the cell: {state, window,
// opened, cooldown, probe_at, probe_owner, probe_until}, and for read
// whether the source and the destination are paused (1 or 0). The hash
// expires a day after its last change once closed.
var redisBreakerScript = redis.NewScript(`
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'state', 'window', 'opened', 'cooldown', 'probe_at', 'probe_owner', 'probe_until')
local state, window = h[1] or 'closed', h[2] or ''
local opened, cooldown, probeAt = tonumber(h[3]) or 0, tonumber(h[4]) or 0, tonumber(h[5]) or 0
local owner, untilMs = h[6] or '', tonumber(h[7]) or 0
local op, pct, of, base = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local maxCooldown = ` + strconv.FormatInt(MaxCooldown.Milliseconds(), 10) + `
local function open(cd)
	state, window, opened, cooldown, probeAt, owner, untilMs = 'open', '', now, cd, now + cd, '', 0
end
local changed = false
if op == 'ok' or op == 'fail' then
	changed = true
	if state == 'closed' then
		local bit = '0'
		if op == 'fail' then bit = '1' end
		window = window .. bit
		if #window > of then window = string.sub(window, #window - of + 1) end
		local _, fails = string.gsub(window, '1', '')
		if #window == of and fails * 100 >= pct * of then
			open(base)
		end
	elseif state == 'probing' and ARGV[7] == '1' and op == 'ok' then
		state, window, opened, cooldown, probeAt, owner, untilMs = 'closed', '', 0, 0, 0, '', 0
	elseif state == 'probing' and ARGV[7] == '1' then
		open(math.min(2 * cooldown, maxCooldown))
	else
		changed = false
	end
elseif op == 'probe' then
	if (state == 'open' and now >= probeAt) or (state == 'probing' and (owner == ARGV[5] or now >= untilMs)) then
		state, owner, untilMs = 'probing', ARGV[5], now + tonumber(ARGV[6])
		changed = true
	end
end
if changed then
	redis.call('HSET', KEYS[1], 'state', state, 'window', window, 'opened', opened, 'cooldown', cooldown,
		'probe_at', probeAt, 'probe_owner', owner, 'probe_until', untilMs)
	if state == 'closed' then
		redis.call('PEXPIRE', KEYS[1], 86400000)
	else
		redis.call('PERSIST', KEYS[1])
	end
end
local out = {state, window, opened, cooldown, probeAt, owner, untilMs}
if op == 'read' then
	local p = redis.call('HMGET', KEYS[2], 'paused', ARGV[8])
	out[8], out[9] = p[1] and 1 or 0, p[2] and 1 or 0
end
return out
`)

func (q *redisQueue) destinations(ctx context.Context, routes map[string]string) (map[string]string, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	key := q.streams.SourceTag(q.source, "") + ":destinations"
	pipe := q.client.Pipeline()
	for id, u := range routes {
		pipe.HSet(ctx, key, id, u)
	}
	all := pipe.HGetAll(ctx, key)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, err
	}
	return all.Val(), nil
}

func (q *redisQueue) forgetDestination(ctx context.Context, id string) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	return q.client.HDel(ctx, q.streams.SourceTag(q.source, "")+":destinations", id).Err()
}

// Interface guard
var _ control = (*redisControl)(nil)
