package inbox

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// The redis store's histories (attempts.go): an event's history is a list,
// `{<key_prefix>:<source>}:attempts:<key>`, one element per attempt,
// `<n>\n<attempt>` (n counts every attempt of the event), trimmed to the
// newest event.MaxAttempts and expiring its life after the last; with a
// bound on the source's histories, a sorted set `{…}:attempts` of the keys
// by the time of their last attempt, from which the oldest go first. Both
// have the source's hash tag: one script writes them on one node.

// attemptScript records one attempt. KEYS: the history, the sorted set of
// histories. ARGV: the encoded attempt, the most attempts kept, life (ms),
// now (ms), the most histories (0 for no bound), the key, the prefix of a
// history's name. Returns the attempt's number.
var attemptScript = redis.NewScript(event.PushAttemptLua + `
local n = push_attempt(KEYS[1], ARGV[1], ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local most = tonumber(ARGV[5])
if most > 0 then
	redis.call('ZADD', KEYS[2], ARGV[4], ARGV[6])
	-- those older than their life have expired already
	redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[4]) - tonumber(ARGV[3])))
	local over = redis.call('ZCARD', KEYS[2]) - most
	if over > 0 then
		local gone = redis.call('ZPOPMIN', KEYS[2], over)
		for i = 1, #gone, 2 do
			redis.call('DEL', ARGV[7] .. gone[i])
		end
	end
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return n
`)

// redisAttempts is a source's histories on Redis.
type redisAttempts struct {
	q      *redisQueue
	prefix string // `{<key_prefix>:<source>}:attempts`
}

func (q *redisQueue) attempts() attemptLog { return q.histories() }

func (q *redisQueue) histories() redisAttempts {
	return redisAttempts{q: q, prefix: q.streams.SourceTag(q.source, "") + ":attempts"}
}

// name is the history of the event of key.
func (l redisAttempts) name(key string) string { return l.prefix + ":" + key }

// add records an attempt in its event's history.
func (l redisAttempts) add(ctx context.Context, lg *logged) error {
	ctx, cancel := l.q.call(ctx)
	defer cancel()
	a := event.AppendAttempt(nil, &lg.attempt)
	return attemptScript.Run(ctx, l.q.client, []string{l.name(lg.key), l.prefix},
		a, event.MaxAttempts, max(lg.life.Milliseconds(), 1), time.Now().UnixMilli(), lg.max, lg.key, l.prefix+":").Err()
}

func (l redisAttempts) read(ctx context.Context, keys []string) ([]event.History, error) {
	ctx, cancel := l.q.call(ctx)
	defer cancel()
	pipe := l.q.client.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.LRange(ctx, l.name(k), 0, -1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]event.History, len(keys))
	for i, c := range cmds {
		out[i] = event.ListedHistory(c.Val())
	}
	return out, nil
}

// logAttempt records m's attempt, before its outcome: a failure is logged,
// and the outcome recorded all the same.
func (q *redisQueue) logAttempt(ctx context.Context, m message) {
	if m.logged == nil {
		return
	}
	if err := q.histories().add(ctx, m.logged); err != nil {
		q.logger.Warn("recording an inbox delivery attempt failed; the event's history misses it", zap.String("key", m.ev.Key), zap.Error(err))
	}
}
