package archive

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// The redis store's redeliveries (redeliveries.go). A stream entry cannot
// be changed, so an event's redeliveries are a list beside the stream,
// `{<key_prefix>:<source>}:archive:attempts:<id>`, one element per
// redelivery as the inbox keeps its attempts ("<n>\n<attempt>",
// event.ListedHistory), trimmed to the newest event.MaxAttempts and
// expiring when its event does (its id's time plus retention). A sorted
// set, `{…}:archive:attempts`, indexes the lists by the event's id (one
// score, members ordered by the id written at a fixed width): a page of
// the list reads in the same round trip which of its events have
// redeliveries, and reads their lists only when some have. It holds at
// most max_events lists, those of events older than retention and then
// the oldest dropped first, and expires retention after the last
// redelivery. All share the source's hash tag: one script writes them on
// one node.

// redisRedeliveredLua keeps one redelivery. KEYS: the event stream, the
// index, the event's list. ARGV: the event's id, its index member, the
// encoded attempt, the most attempts kept, when the list expires (unix
// ms), retention (ms), the index member of the oldest id retention keeps,
// max_events, the prefix of a list's name. Returns the count of the
// event's redeliveries, 0 when the event is not in the stream.
const redisRedeliveredLua = event.PushAttemptLua + `
if #redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[1], 'COUNT', 1) == 0 then
	return 0
end
local n = push_attempt(KEYS[3], ARGV[3], ARGV[4])
redis.call('PEXPIREAT', KEYS[3], ARGV[5])
redis.call('ZADD', KEYS[2], 0, ARGV[2])
local gone = redis.call('ZRANGEBYLEX', KEYS[2], '-', '(' .. ARGV[7])
for i = 1, #gone do
	redis.call('DEL', ARGV[9] .. gone[i])
end
redis.call('ZREMRANGEBYLEX', KEYS[2], '-', '(' .. ARGV[7])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[8])
if over > 0 then
	local oldest = redis.call('ZPOPMIN', KEYS[2], over)
	for i = 1, #oldest, 2 do
		redis.call('DEL', ARGV[9] .. oldest[i])
	end
end
redis.call('PEXPIRE', KEYS[2], ARGV[6])
return n
`

var redisRedelivered = redis.NewScript(redisRedeliveredLua)

// redeliveryMember is an event's member in the index: its id at a fixed
// width, so that the index's order (by member) is the ids'.
func redeliveryMember(id event.ID) string { return fmt.Sprintf("%020d-%020d", id.MS, id.Seq) }

// redeliveries is the index of the source's redelivery lists.
func (b *redisBackend) redeliveries() string { return b.stream + ":attempts" }

// redeliveryList is the list of the redeliveries of the event of member.
func (b *redisBackend) redeliveryList(member string) string {
	return b.redeliveries() + ":" + member
}

func (b *redisBackend) redelivered(ctx context.Context, id event.ID, at *event.Attempt) error {
	member := redeliveryMember(id)
	expires := int64(min(id.MS, 1<<62)) + max(b.a.cfg.Retention.Milliseconds(), 1)
	n, err := redisRedelivered.Run(ctx, b.client, []string{b.stream, b.redeliveries(), b.redeliveryList(member)},
		id.String(), member, event.AppendAttempt(nil, at), event.MaxAttempts, expires,
		max(b.a.cfg.Retention.Milliseconds(), 1), redeliveryMember(b.a.cutoff()), b.a.cfg.MaxEvents,
		b.redeliveries()+":").Int()
	if err != nil {
		return fmt.Errorf("redis store: archive: %w", err)
	}
	if n == 0 {
		return errGone
	}
	return nil
}

// indexedRedeliveries queues, on pipe, the read of the index members of
// the newest count events from hi down to lo: those of a page of count
// events in that range, and maybe older ones.
func (b *redisBackend) indexedRedeliveries(ctx context.Context, pipe redis.Pipeliner, hi, lo event.ID, count int) *redis.StringSliceCmd {
	return pipe.ZRevRangeByLex(ctx, b.redeliveries(), &redis.ZRangeBy{
		Max: "[" + redeliveryMember(hi), Min: "[" + redeliveryMember(lo), Count: int64(count),
	})
}

// addRedeliveries adds, to the events of a page that the index holds
// (indexed, from indexedRedeliveries), their redeliveries, read in one
// round trip; none is read when none of them has any.
func (b *redisBackend) addRedeliveries(ctx context.Context, c redis.Cmdable, evs []Event, indexed []string) error {
	if len(indexed) == 0 {
		return nil
	}
	has := make(map[string]bool, len(indexed))
	for _, m := range indexed {
		has[m] = true
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(evs))
	for i := range evs {
		id, ok := event.ParseID(evs[i].ID)
		if m := redeliveryMember(id); ok && has[m] {
			cmds[i] = pipe.LRange(ctx, b.redeliveryList(m), 0, -1)
		}
	}
	if pipe.Len() == 0 {
		return nil
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	for i, cmd := range cmds {
		if cmd != nil {
			evs[i].addRedeliveries(cmd.Val())
		}
	}
	return nil
}

// addRedeliveries adds an event's redeliveries, as their list holds them,
// after its own attempts.
func (ev *Event) addRedeliveries(list []string) {
	if len(list) > 0 {
		ev.SetAttempts(ev.attempts.Then(event.ListedHistory(list)))
	}
}
