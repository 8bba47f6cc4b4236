package inbox

import (
	"context"
	"errors"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
)

// What the admin API reads and does: counts, dead letters, redelivery.

// ErrNoDeadEvent is returned for a dead letter id that is not one.
var ErrNoDeadEvent = errors.New("no dead-lettered event with this id")

// Counts reads the number of events in each state.
func (ib *Inbox) Counts(ctx context.Context) (Counts, error) { return ib.q.counts(ctx) }

// DeadLetters lists up to count dead-lettered events, oldest first, from
// the id start on ("-" for the first), redacted as the archive stores
// events.
func (ib *Inbox) DeadLetters(ctx context.Context, start string, count int64) ([]DeadLetter, error) {
	evs, err := ib.q.dead(ctx, start, count)
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, 0, len(evs))
	for _, ev := range evs {
		out = append(out, DeadLetter{
			ID:         ev.ID,
			Key:        ev.Key,
			Method:     ev.Method,
			URI:        ib.cfg.Redact.URI(ev.URI),
			Headers:    ib.cfg.Redact.Header(event.ParseHeaderBlock(ev.Headers)),
			Attempts:   ev.Attempts,
			LastStatus: ev.LastStatus,
			LastError:  ev.LastError,
			Received:   ev.Received,
			Failed:     ev.Failed,
		})
	}
	return out, nil
}

// Redeliver moves a dead-lettered event back into the queue, with a fresh
// retry schedule, and returns its new id; ErrNoDeadEvent when id is not a
// dead letter.
func (ib *Inbox) Redeliver(ctx context.Context, id string) (string, error) {
	return ib.q.redeliver(ctx, id)
}

// RedeliverAll moves every event dead-lettered so far back into the queue,
// a page at a time, and returns how many it moved. Events that die again
// meanwhile stay dead: the loop ends.
func (ib *Inbox) RedeliverAll(ctx context.Context) (int, error) {
	newest, ok, err := ib.q.newestDead(ctx)
	if err != nil || !ok {
		return 0, err
	}
	last, _ := event.ParseID(newest)
	n := 0
	for {
		evs, err := ib.q.dead(ctx, "-", 100)
		if err != nil || len(evs) == 0 {
			return n, err
		}
		for _, ev := range evs {
			if id, _ := event.ParseID(ev.ID); last.Less(id) {
				return n, nil
			}
			if _, err := ib.q.redeliver(ctx, ev.ID); err == nil {
				n++
			} else if !errors.Is(err, ErrNoDeadEvent) {
				return n, err
			}
		}
	}
}

// Discard deletes a dead-lettered event; it reports whether there was one.
func (ib *Inbox) Discard(ctx context.Context, id string) (bool, error) { return ib.q.discard(ctx, id) }

// Enqueue adds an event (an archived delivery, redelivered) to the queue as
// a new delivery, with a fresh retry schedule, and returns its id.
func (ib *Inbox) Enqueue(ctx context.Context, ev *event.Request) (string, error) {
	return ib.q.enqueue(ctx, ev)
}
