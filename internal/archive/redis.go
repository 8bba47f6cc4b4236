package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

// The redis store's archive: one stream per source,
// `{<key_prefix>:<source>}:archive`, trimmed on every append to max_events
// and to retention (docs/archive.md).

// redisReadTimeout bounds one read of the archive by the admin API.
const redisReadTimeout = 5 * time.Second

// redisBackend is the archive of a handler on the redis store.
type redisBackend struct {
	seam    redisstore.Seam
	client  redis.UniversalClient // a reference of our own, held until close
	release func()
	stream  string
	maxLen  string // max_events
	a       *Archive
}

func newRedisBackend(seam redisstore.Seam, a *Archive) (*redisBackend, error) {
	// a reference of our own: the store may be cleaned up before the queue
	// has appended its last events
	client, release, err := seam.Client()
	if err != nil {
		return nil, err
	}
	return &redisBackend{
		seam: seam, client: client, release: release,
		stream: seam.Keys(a.cfg.Source).Archive, maxLen: strconv.Itoa(a.cfg.MaxEvents), a: a,
	}, nil
}

// appendCmds returns the commands that append e: XADD, trimming the stream
// to about max_events, then XTRIM to retention (both by whole stream nodes,
// as `~` allows, so trimming stays cheap). XADD takes one trimming
// strategy, so retention is a command of its own.
func (b *redisBackend) appendCmds(e *Entry) [][]any {
	xadd := append(make([]any, 0, 6+fieldCount), "XADD", b.stream, "MAXLEN", "~", b.maxLen, "*")
	xadd = e.appendFields(xadd)
	minID := strconv.FormatInt(max(now().Add(-b.a.cfg.Retention).UnixMilli(), 0), 10)
	return [][]any{xadd, {"XTRIM", b.stream, "MINID", "~", minID}}
}

func (b *redisBackend) completeAndAppend(ctx context.Context, key, guard, owner string, record []byte, ttl time.Duration, e *Entry) (err, appendErr error) {
	then, err := b.seam.CompleteThen(ctx, key, guard, owner, record, ttl, b.appendCmds(e))
	return err, appendResult(then.Val, then.Err)
}

// appendResult checks the reply of an append.
func appendResult(v any, err error) error {
	if err != nil {
		return fmt.Errorf("redis store: archive: %w", err)
	}
	if _, ok := v.(string); !ok {
		return fmt.Errorf("redis store: archive: unexpected reply %T", v)
	}
	return nil
}

func (b *redisBackend) appendBatch(ctx context.Context, es []*Entry) error {
	pipe := b.client.Pipeline()
	cmds := make([]*redis.Cmd, len(es))
	for i, e := range es {
		call := b.appendCmds(e)
		cmds[i] = pipe.Do(ctx, call[0]...)
		if i == len(es)-1 { // one trim for the batch
			pipe.Do(ctx, call[1]...)
		}
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var first error
	for _, cmd := range cmds {
		if err := appendResult(cmd.Result()); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (b *redisBackend) page(ctx context.Context, hi, lo event.ID, count int) ([]Event, error) {
	ctx, cancel := context.WithTimeout(ctx, redisReadTimeout)
	defer cancel()
	msgs, err := b.client.XRevRangeN(ctx, b.stream, hi.String(), lo.String(), int64(count)).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]Event, len(msgs))
	for i, m := range msgs {
		out[i] = messageEvent(m)
	}
	return out, nil
}

func (b *redisBackend) event(ctx context.Context, id event.ID) (Event, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, redisReadTimeout)
	defer cancel()
	msgs, err := b.client.XRangeN(ctx, b.stream, id.String(), id.String(), 1).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return Event{}, false, err
	}
	if len(msgs) == 0 {
		return Event{}, false, nil
	}
	return messageEvent(msgs[0]), true, nil
}

// messageEvent decodes a stream entry of the archive.
func messageEvent(m redis.XMessage) Event {
	return eventFromFields(m.ID, func(name string) (string, bool) {
		v, ok := m.Values[name]
		s, _ := v.(string)
		return s, ok
	})
}

func (b *redisBackend) size(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.seam.Timeout())
	defer cancel()
	return b.client.XLen(ctx, b.stream).Result()
}

func (b *redisBackend) timeout() time.Duration { return b.seam.Timeout() }

func (b *redisBackend) close() {
	if b.release != nil {
		b.release()
		b.release = nil
	}
}

// Interface guard
var _ backend = (*redisBackend)(nil)
