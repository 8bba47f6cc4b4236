package inbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The redis store's queue: a source's events are a Redis Stream read by a
// consumer group shared by every instance, retries wait in a sorted set,
// and dead letters are a second stream, all under the source's hash tag
// (redisstore.SourceKeys). An event in delivery is a pending entry of the
// group: a worker that dies leaves it pending, and another reclaims it.

// group is the consumer group of every inbox stream.
const group = "webhook_idempotency"

// fieldSuspected holds Event.Suspected in a stream entry.
const fieldSuspected = "suspected"

// Lua shared by the scripts: fields(entry, skip) copies a stream entry's
// field list without the fields named in skip; add appends values.
const luaFields = `
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
`

var (
	// KEYS: stream [, idempotency key]. ARGV: group, id, ttl. A delivered
	// event leaves the stream, and its key (when given) is kept for ttl.
	ackScript = redis.NewScript(`
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
if KEYS[2] then
	redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return redis.call('XDEL', KEYS[1], ARGV[2])
`)

	// KEYS: stream, retry set. ARGV: group, id, due (ms), member. The event
	// stays in the stream, acknowledged, until it is due.
	scheduleScript = redis.NewScript(`
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[4])
return redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
`)

	// KEYS: stream, retry set. ARGV: now (ms), limit. Moves due events back
	// into the stream as new entries carrying their attempt count.
	moveScript = redis.NewScript(luaFields + `
local skip = {attempts = true, last_status = true, last_error = true}
local due = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, m in ipairs(due) do
	local id, attempts, status, err = string.match(m, '^([^\n]*)\n([^\n]*)\n([^\n]*)\n(.*)$')
	if id then
		local e = redis.call('XRANGE', KEYS[1], id, id)
		if e[1] then
			local out = add(fields(e[1][2], skip), 'attempts', attempts, 'last_status', status, 'last_error', err)
			redis.call('XADD', KEYS[1], '*', unpack(out))
			redis.call('XDEL', KEYS[1], id)
		end
	end
	redis.call('ZREM', KEYS[2], m)
end
return #due
`)

	// KEYS: stream, dead stream. ARGV: group, id, attempts, status, error,
	// failed (ms). Moves an event to the dead-letter stream.
	deadScript = redis.NewScript(luaFields + `
local skip = {attempts = true, last_status = true, last_error = true, failed = true}
local e = redis.call('XRANGE', KEYS[1], ARGV[2], ARGV[2])
if e[1] then
	local out = add(fields(e[1][2], skip), 'attempts', ARGV[3], 'last_status', ARGV[4], 'last_error', ARGV[5], 'failed', ARGV[6])
	redis.call('XADD', KEYS[2], '*', unpack(out))
end
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return redis.call('XDEL', KEYS[1], ARGV[2])
`)

	// KEYS: dead stream, stream. ARGV: id. Moves a dead event back into
	// the stream with a fresh retry schedule; returns its new id, or false
	// when there is no such dead event.
	redeliverScript = redis.NewScript(luaFields + `
local e = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1])
if not e[1] then
	return false
end
local f = e[1][2]
local attempts = '0'
for i = 1, #f, 2 do
	if f[i] == 'attempts' then attempts = f[i+1] end
end
local out = add(fields(f, {base = true, failed = true}), 'base', attempts)
local id = redis.call('XADD', KEYS[2], '*', unpack(out))
redis.call('XDEL', KEYS[1], ARGV[1])
return id
`)
)

// redisQueue is an inbox's queue on the redis store.
type redisQueue struct {
	seam     redisstore.Seam
	client   redis.UniversalClient // a reference of our own, held until close
	release  func()
	timeout  time.Duration // the store's call timeout
	cluster  bool
	keys     redisstore.SourceKeys
	consumer string
	logger   *zap.Logger
	// accepting bounds a Cluster claim's lease: the key's claim lasts as
	// long as storing the event may take.
	accepting time.Duration
	acceptTTL time.Duration // an accepted key's ttl
	noteTTL   time.Duration // a note's ttl: the handler's
	grouped   atomic.Bool   // the consumer group is known to exist
}

func newRedisQueue(seam redisstore.Seam, ib *Inbox) (*redisQueue, error) {
	// a reference of our own: the store may be cleaned up before the
	// workers have finished their deliveries
	client, release, err := seam.Client()
	if err != nil {
		return nil, err
	}
	return &redisQueue{
		seam: seam, client: client, release: release,
		timeout: seam.Timeout(), cluster: seam.Cluster(), keys: seam.Keys(ib.cfg.Source),
		consumer: ib.consumer, logger: ib.logger,
		accepting: ib.cfg.Timeout + seam.Timeout(),
		acceptTTL: ib.acceptTTL, noteTTL: ib.cfg.TTL,
	}, nil
}

// call bounds one call by the store's timeout.
func (q *redisQueue) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, q.timeout)
}

// fields builds the stream entry of an event.
func fields(ev *event.Request, attempts, base string) []any {
	return []any{
		event.FieldSource, ev.Source,
		event.FieldKey, ev.Key,
		event.FieldStoreKey, ev.StoreKey,
		event.FieldMethod, ev.Method,
		event.FieldURI, ev.URI,
		event.FieldHost, ev.Host,
		event.FieldProto, ev.Proto,
		event.FieldRemote, ev.Remote,
		event.FieldHeaders, ev.Headers,
		event.FieldBody, ev.Body,
		event.FieldReceived, event.Millis(ev.Received),
		event.FieldAttempts, attempts,
		event.FieldBase, base,
	}
}

// fromMessage decodes a stream entry.
func fromMessage(m redis.XMessage) Event {
	return fromFields(m.ID, func(name string) string { s, _ := m.Values[name].(string); return s })
}

// fromFields decodes an event from its stored fields.
func fromFields(id string, f func(name string) string) Event {
	attempts, _ := strconv.Atoi(f(event.FieldAttempts))
	base, _ := strconv.Atoi(f(event.FieldBase))
	status, _ := strconv.Atoi(f(event.FieldLastStatus))
	return Event{
		Request: event.Request{
			Source: f(event.FieldSource), Key: f(event.FieldKey), StoreKey: f(event.FieldStoreKey),
			Method: f(event.FieldMethod), URI: f(event.FieldURI), Host: f(event.FieldHost),
			Proto: f(event.FieldProto), Remote: f(event.FieldRemote), Headers: f(event.FieldHeaders),
			Body: []byte(f(event.FieldBody)), Received: event.UnixMilli(f(event.FieldReceived)),
		},
		ID: id, Attempts: attempts, Base: base, LastStatus: status,
		LastError: f(event.FieldLastError), Failed: event.UnixMilli(f(event.FieldFailed)),
		Suspected: f(fieldSuspected),
	}
}

func (q *redisQueue) accept(ctx context.Context, key, guard string, noted bool, owner string, record []byte, ev *event.Request) (store.ClaimResult, string, error) {
	if q.cluster {
		return q.acceptCluster(ctx, key, guard, noted, owner, record, ev)
	}
	res, a, err := q.seam.ClaimAndAppend(ctx, key, guard, noted, q.keys.Inbox, record, q.acceptTTL, q.noteTTL, fields(ev, "0", "0"))
	return res, a.ID, err
}

// acceptCluster accepts on Redis Cluster, where the key and the stream
// live on different nodes: the key is claimed, the event stored, and the
// key then completed.
func (q *redisQueue) acceptCluster(ctx context.Context, key, guard string, noted bool, owner string, record []byte, ev *event.Request) (store.ClaimResult, string, error) {
	s := q.seam.Store()
	var res store.ClaimResult
	var err error
	entry := fields(ev, "0", "0")
	completeGuard := guard
	if noted {
		completeGuard = ""
		var prev string
		res, prev, err = s.ClaimNoted(ctx, key, guard, owner, q.accepting, q.noteTTL)
		if prev != "" && prev != key {
			entry = append(entry, fieldSuspected, prev)
		}
	} else {
		res, err = s.ClaimGuarded(ctx, key, guard, owner, q.accepting)
	}
	if err != nil || res.State != store.StateClaimed {
		return res, "", err
	}
	cctx, cancel := q.call(ctx)
	id, err := q.client.XAdd(cctx, &redis.XAddArgs{Stream: q.keys.Inbox, Values: entry}).Result()
	cancel()
	if err != nil {
		_ = s.ReleaseGuarded(context.Background(), key, completeGuard, owner)
		return store.ClaimResult{}, "", fmt.Errorf("redis store: storing event: %w", err)
	}
	if err := s.CompleteGuarded(context.Background(), key, completeGuard, owner, record, q.acceptTTL); err != nil {
		// the event is stored, so it is accepted; only a duplicate arriving
		// after the lease could be accepted again
		q.logger.Warn("recording an accepted event's key failed; a duplicate may be accepted again",
			zap.String("key", key), zap.Error(err))
	}
	return res, id, nil
}

// ensureGroup creates the stream and its consumer group if needed.
func (q *redisQueue) ensureGroup(ctx context.Context) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	err := q.client.XGroupCreateMkStream(ctx, q.keys.Inbox, group, "0").Err()
	if err != nil && !strings.HasPrefix(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("creating the inbox consumer group: %w", err)
	}
	q.grouped.Store(true)
	return nil
}

func (q *redisQueue) next(ctx context.Context, wait time.Duration) (message, bool, error) {
	if !q.grouped.Load() {
		if err := q.ensureGroup(ctx); err != nil {
			return message{}, false, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, wait+q.timeout)
	defer cancel()
	streams, err := q.client.XReadGroup(rctx, &redis.XReadGroupArgs{
		Group: group, Consumer: q.consumer, Streams: []string{q.keys.Inbox, ">"}, Count: 1, Block: wait,
	}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return message{}, false, nil
	case err != nil && strings.HasPrefix(err.Error(), "NOGROUP"):
		q.grouped.Store(false) // the stream was deleted: made again next time
		return message{}, false, nil
	case err != nil:
		return message{}, false, err
	case len(streams) == 0 || len(streams[0].Messages) == 0:
		return message{}, false, nil
	}
	m := streams[0].Messages[0]
	return message{id: m.ID, ev: fromMessage(m), deliveries: 1}, true, nil
}

func (q *redisQueue) reclaim(ctx context.Context, minIdle time.Duration) (message, bool, error) {
	rctx, cancel := q.call(ctx)
	msgs, _, err := q.client.XAutoClaim(rctx, &redis.XAutoClaimArgs{
		Stream: q.keys.Inbox, Group: group, Consumer: q.consumer, MinIdle: minIdle, Start: "0-0", Count: 1,
	}).Result()
	cancel()
	if errors.Is(err, redis.Nil) || err != nil && strings.HasPrefix(err.Error(), "NOGROUP") {
		return message{}, false, nil
	}
	if err != nil || len(msgs) == 0 {
		return message{}, false, err
	}
	// every earlier delivery of this entry was an attempt that a dead
	// worker never recorded
	deliveries := int64(2)
	rctx, cancel = q.call(ctx)
	if p, err := q.client.XPendingExt(rctx, &redis.XPendingExtArgs{
		Stream: q.keys.Inbox, Group: group, Start: msgs[0].ID, End: msgs[0].ID, Count: 1,
	}).Result(); err == nil && len(p) == 1 {
		deliveries = p[0].RetryCount
	}
	cancel()
	return message{id: msgs[0].ID, ev: fromMessage(msgs[0]), deliveries: deliveries}, true, nil
}

func (q *redisQueue) moveDue(ctx context.Context, now time.Time) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	return moveScript.Run(ctx, q.client, []string{q.keys.Inbox, q.keys.Retry}, now.UnixMilli(), 100).Err()
}

func (q *redisQueue) delivered(ctx context.Context, m message, ttl time.Duration) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	storeKey := m.ev.StoreKey
	keys := []string{q.keys.Inbox, storeKey}
	if q.cluster || storeKey == "" {
		keys = keys[:1] // the key is on another slot: a call of its own
	}
	ms := strconv.FormatInt(max(ttl.Milliseconds(), 1), 10)
	if err := ackScript.Run(ctx, q.client, keys, group, m.id, ms).Err(); err != nil {
		return err
	}
	if len(keys) == 1 && storeKey != "" {
		if err := q.client.PExpire(ctx, storeKey, ttl).Err(); err != nil {
			q.logger.Warn("shortening a delivered event's key to ttl failed; it expires later", zap.String("key", storeKey), zap.Error(err))
		}
	}
	return nil
}

func (q *redisQueue) schedule(ctx context.Context, m message, attempts, status int, reason string, due time.Time) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	member := m.id + "\n" + strconv.Itoa(attempts) + "\n" + strconv.Itoa(status) + "\n" + reason
	return scheduleScript.Run(ctx, q.client, []string{q.keys.Inbox, q.keys.Retry},
		group, m.id, (due.UnixNano()+int64(time.Millisecond)-1)/int64(time.Millisecond), member).Err()
}

func (q *redisQueue) deadLetter(ctx context.Context, m message, attempts, status int, reason string, failed time.Time) error {
	ctx, cancel := q.call(ctx)
	defer cancel()
	return deadScript.Run(ctx, q.client, []string{q.keys.Inbox, q.keys.Dead},
		group, m.id, attempts, status, reason, failed.UnixMilli()).Err()
}

func (q *redisQueue) counts(ctx context.Context) (Counts, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	p := q.client.Pipeline()
	stream := p.XLen(ctx, q.keys.Inbox)
	retry := p.ZCard(ctx, q.keys.Retry)
	dead := p.XLen(ctx, q.keys.Dead)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return Counts{}, err
	}
	return Counts{
		Pending:   max(stream.Val()-retry.Val(), 0),
		Scheduled: retry.Val(),
		Dead:      dead.Val(),
	}, nil
}

func (q *redisQueue) dead(ctx context.Context, start string, count int64) ([]Event, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	msgs, err := q.client.XRangeN(ctx, q.keys.Dead, start, "+", count).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(msgs))
	for i, m := range msgs {
		out[i] = fromMessage(m)
	}
	return out, nil
}

func (q *redisQueue) newestDead(ctx context.Context) (string, bool, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	newest, err := q.client.XRevRangeN(ctx, q.keys.Dead, "+", "-", 1).Result()
	if err != nil || len(newest) == 0 {
		return "", false, err
	}
	return newest[0].ID, true, nil
}

func (q *redisQueue) redeliver(ctx context.Context, id string) (string, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	v, err := redeliverScript.Run(ctx, q.client, []string{q.keys.Dead, q.keys.Inbox}, id).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNoDeadEvent
	}
	if err != nil {
		return "", err
	}
	newID, _ := v.(string)
	return newID, nil
}

func (q *redisQueue) discard(ctx context.Context, id string) (bool, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	n, err := q.client.XDel(ctx, q.keys.Dead, id).Result()
	return n == 1, err
}

func (q *redisQueue) enqueue(ctx context.Context, ev *event.Request) (string, error) {
	ctx, cancel := q.call(ctx)
	defer cancel()
	return q.client.XAdd(ctx, &redis.XAddArgs{Stream: q.keys.Inbox, Values: fields(ev, "0", "0")}).Result()
}

// close deletes this worker set from the consumer group when it holds no
// pending event (deleting it otherwise would lose them), and gives the
// client back.
func (q *redisQueue) close(started bool) {
	if started {
		ctx, cancel := q.call(context.Background())
		pending, err := q.client.XPendingExt(ctx, &redis.XPendingExtArgs{
			Stream: q.keys.Inbox, Group: group, Start: "-", End: "+", Count: 1, Consumer: q.consumer,
		}).Result()
		if err == nil && len(pending) == 0 {
			_ = q.client.XGroupDelConsumer(ctx, q.keys.Inbox, group, q.consumer).Err()
		}
		cancel()
	}
	q.release()
}

// Interface guard
var _ queue = (*redisQueue)(nil)
