package series

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The redis store's series: a hash per bucket,
// `{<key_prefix>:<source>}:series:m:<Unix minute>` (expiring 25 hours
// after its last write) and `…:series:h:<Unix hour>` (8 days), and the
// totals `{<key_prefix>:<source>}:series` (30 days), the fields of
// fields.go; one hash tag, so Redis Cluster keeps a source's on one slot.
// A flush is one script: every instance's counts add up (HINCRBY), the
// highest backlog wins.

// redisAddLua adds a flush to the minute's hash (KEYS[1]), the hour's
// (KEYS[2]) and the totals (KEYS[3]). ARGV: the three TTLs in
// milliseconds, now (Unix seconds), the numbers of counts, of buckets and
// of highs, then each as a field and a number.
const redisAddLua = `
local i = 8
for _ = 1, tonumber(ARGV[5]) do
	redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
	redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
	redis.call('HINCRBY', KEYS[3], ARGV[i], ARGV[i + 1])
	i = i + 2
end
for _ = 1, tonumber(ARGV[6]) do
	redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
	redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
	i = i + 2
end
for _ = 1, tonumber(ARGV[7]) do
	local n = tonumber(ARGV[i + 1])
	for k = 1, 2 do
		local cur = tonumber(redis.call('HGET', KEYS[k], ARGV[i]))
		if not cur or n > cur then
			redis.call('HSET', KEYS[k], ARGV[i], n)
		end
	end
	i = i + 2
end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
redis.call('PEXPIRE', KEYS[2], ARGV[2])
if tonumber(ARGV[5]) > 0 then
	redis.call('HSETNX', KEYS[3], 'since', ARGV[4])
	redis.call('PEXPIRE', KEYS[3], ARGV[3])
end
return 1
`

var redisAddScript = redis.NewScript(redisAddLua)

type redisBackend struct {
	client  redis.UniversalClient // a reference of our own, held until close
	release func()
	prefix  string // {<key_prefix>:<source>}:series
	call    time.Duration
}

func newRedisBackend(st redisstore.Streams, source string) (*redisBackend, error) {
	// a reference of our own: the store may be cleaned up before the last
	// flush
	client, release, err := st.Client()
	if err != nil {
		return nil, err
	}
	return &redisBackend{client: client, release: release, prefix: st.SourceTag(source, "") + ":series", call: st.Timeout()}, nil
}

func (b *redisBackend) key(t tier, unit int64) string {
	return b.prefix + ":" + string(t.tag) + ":" + strconv.FormatInt(unit, 10)
}

func (b *redisBackend) add(ctx context.Context, w *write) error {
	keys := []string{b.key(minutes, minutes.unitOf(w.at)), b.key(hours, hours.unitOf(w.at)), b.prefix}
	args := make([]any, 0, 7+2*(len(w.counts)+len(w.buckets)+len(w.highs)))
	args = append(args, millis(minutes.keep), millis(hours.keep), millis(totalsKeep), w.at.Unix(),
		len(w.counts), len(w.buckets), len(w.highs))
	for _, fs := range [][]field{w.counts, w.buckets, w.highs} {
		for _, f := range fs {
			args = append(args, f.name, f.n)
		}
	}
	if err := redisAddScript.Run(ctx, b.client, keys, args...).Err(); err != nil {
		return fmt.Errorf("redis store: series: %w", err)
	}
	return nil
}

func (b *redisBackend) buckets(ctx context.Context, t tier, first, last int64) (map[int64]fields, error) {
	pipe := b.client.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, 0, last-first+1)
	for u := first; u <= last; u++ {
		cmds = append(cmds, pipe.HGetAll(ctx, b.key(t, u)))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("redis store: series: %w", err)
	}
	out := make(map[int64]fields, len(cmds))
	for i, c := range cmds {
		if m := c.Val(); len(m) > 0 {
			out[first+int64(i)] = parseFields(m)
		}
	}
	return out, nil
}

func (b *redisBackend) totals(ctx context.Context) (fields, error) {
	m, err := b.client.HGetAll(ctx, b.prefix).Result()
	if err != nil {
		return nil, fmt.Errorf("redis store: series: %w", err)
	}
	return parseFields(m), nil
}

// parseFields reads a hash's fields; a field that is no number is left
// out.
func parseFields(m map[string]string) fields {
	f := make(fields, len(m))
	for k, v := range m {
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			f[k] = n
		}
	}
	return f
}

func (b *redisBackend) timeout() time.Duration { return b.call }

func (b *redisBackend) close() { b.release() }

func millis(d time.Duration) int64 { return d.Milliseconds() }
