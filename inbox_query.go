package webhookidempotency

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// What the admin API reads and does: counts, dead letters, redelivery.

var (
	// KEYS: dead stream, stream. ARGV: id. Moves a dead event back into
	// the stream with a fresh retry schedule; returns its new id, or false
	// when there is no such dead event.
	inboxRedeliverScript = redis.NewScript(luaFields + `
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

// inboxCounts is the number of a source's events in each state.
type inboxCounts struct {
	Pending   int64 `json:"pending"`   // waiting for or in delivery
	Scheduled int64 `json:"scheduled"` // waiting for a retry
	Dead      int64 `json:"dead"`      // dead-lettered
}

// counts reads the number of events in each state.
func (ib *inbox) counts(ctx context.Context) (inboxCounts, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	defer cancel()
	p := ib.rc.client.Pipeline()
	stream := p.XLen(ctx, ib.stream)
	retry := p.ZCard(ctx, ib.retry)
	dead := p.XLen(ctx, ib.dead)
	if _, err := p.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return inboxCounts{}, err
	}
	return inboxCounts{
		Pending:   max(stream.Val()-retry.Val(), 0),
		Scheduled: retry.Val(),
		Dead:      dead.Val(),
	}, nil
}

// deadEvent is one dead-lettered event, as the admin API lists it: its
// URI and headers with their secrets redacted (redact.go).
type deadEvent struct {
	ID         string      `json:"id"`
	Key        string      `json:"key"`
	Method     string      `json:"method"`
	URI        string      `json:"uri"`
	Headers    http.Header `json:"headers"`
	Attempts   int         `json:"attempts"`
	LastStatus int         `json:"last_status"`
	LastError  string      `json:"last_error"`
	Received   time.Time   `json:"received"`
	Failed     time.Time   `json:"failed"`
}

// deadEvents lists up to count dead-lettered events, oldest first, from
// the id start on ("-" for the first).
func (ib *inbox) deadEvents(ctx context.Context, start string, count int64) ([]deadEvent, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	defer cancel()
	msgs, err := ib.rc.client.XRangeN(ctx, ib.dead, start, "+", count).Result()
	if err != nil {
		return nil, err
	}
	out := make([]deadEvent, 0, len(msgs))
	for _, m := range msgs {
		ev := m.Values
		attempts, _ := strconv.Atoi(str(ev[fieldAttempts]))
		status, _ := strconv.Atoi(str(ev[fieldLastStatus]))
		uri, header := ib.redact.uri(str(ev[fieldURI])), ib.redact.header(parseHeaderBlock(str(ev[fieldHeaders])))
		out = append(out, deadEvent{
			ID:         m.ID,
			Key:        str(ev[fieldKey]),
			Method:     str(ev[fieldMethod]),
			URI:        uri,
			Headers:    header,
			Attempts:   attempts,
			LastStatus: status,
			LastError:  str(ev[fieldLastError]),
			Received:   unixMilli(str(ev[fieldReceived])),
			Failed:     unixMilli(str(ev[fieldFailed])),
		})
	}
	return out, nil
}

// errNoDeadEvent is returned by redeliver for an id that is not dead.
var errNoDeadEvent = errors.New("no dead-lettered event with this id")

// redeliver moves a dead-lettered event back into the stream, with a fresh
// retry schedule, and returns its new id.
func (ib *inbox) redeliver(ctx context.Context, id string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	defer cancel()
	v, err := inboxRedeliverScript.Run(ctx, ib.rc.client, []string{ib.dead, ib.stream}, id).Result()
	if errors.Is(err, redis.Nil) {
		return "", errNoDeadEvent
	}
	if err != nil {
		return "", err
	}
	newID, _ := v.(string)
	return newID, nil
}

// redeliverAll moves every event dead-lettered so far back into the
// stream, a page at a time, and returns how many it moved. Events that die
// again meanwhile stay dead: the loop ends.
func (ib *inbox) redeliverAll(ctx context.Context) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	newest, err := ib.rc.client.XRevRangeN(rctx, ib.dead, "+", "-", 1).Result()
	cancel()
	if err != nil || len(newest) == 0 {
		return 0, err
	}
	last, _ := parseStreamID(newest[0].ID)
	n := 0
	for {
		events, err := ib.deadEvents(ctx, "-", 100)
		if err != nil || len(events) == 0 {
			return n, err
		}
		for _, ev := range events {
			if id, _ := parseStreamID(ev.ID); last.less(id) {
				return n, nil
			}
			if _, err := ib.redeliver(ctx, ev.ID); err == nil {
				n++
			} else if !errors.Is(err, errNoDeadEvent) {
				return n, err
			}
		}
	}
}

// discard deletes a dead-lettered event; it reports whether there was one.
func (ib *inbox) discard(ctx context.Context, id string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	defer cancel()
	n, err := ib.rc.client.XDel(ctx, ib.dead, id).Result()
	return n == 1, err
}

// enqueue appends an event to the stream as a new delivery, with a fresh
// retry schedule, and returns its id.
func (ib *inbox) enqueue(ctx context.Context, fields []any) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ib.callTimeout)
	defer cancel()
	return ib.rc.client.XAdd(ctx, &redis.XAddArgs{Stream: ib.stream, Values: fields}).Result()
}
