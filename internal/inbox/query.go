package inbox

import (
	"context"
	"errors"
	"slices"
	"time"

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
			TraceID:    ev.Trace.TraceID(),
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
// a new delivery, with a fresh retry schedule, behind the pending events of
// its group, and returns its id.
func (ib *Inbox) Enqueue(ctx context.Context, ev *event.Request) (string, error) {
	return ib.q.enqueue(ctx, ev, ib.groupOf(ev))
}

// Groups is what the admin API shows of an inbox's groups (order_by).
type Groups struct {
	// Pending is the number of groups with an event pending.
	Pending int64 `json:"pending"`
	// Held is the number of events waiting behind the head of their
	// group.
	Held int64 `json:"held"`
	// Longest are the groups that have waited longest, oldest first.
	Longest []GroupState `json:"longest_waiting"`
}

// GroupState is one group with events pending.
type GroupState struct {
	Group string `json:"group"`
	// Pending is the number of its events pending: its head and those
	// held behind it.
	Pending int64 `json:"pending"`
	// Since is when its head was accepted.
	Since time.Time `json:"since"`
	// Head is the event that holds the group.
	Head HeadState `json:"head"`
}

// HeadState is the head of a group: the one event of the group that may be
// delivered now.
type HeadState struct {
	ID string `json:"id"`
	// State is `ready` (waiting for a worker, or for the rate limit),
	// `delivering` or `scheduled` (waiting for a retry, due at Due).
	State      string     `json:"state"`
	Attempts   int        `json:"attempts"`
	LastStatus int        `json:"last_status,omitempty"`
	LastError  string     `json:"last_error,omitempty"`
	Due        *time.Time `json:"due,omitempty"`
}

// sortAndCut keeps the count groups that have waited longest.
func (g *Groups) sortAndCut(count int) {
	slices.SortStableFunc(g.Longest, func(a, b GroupState) int { return a.Since.Compare(b.Since) })
	if len(g.Longest) > count {
		g.Longest = g.Longest[:count]
	}
	if g.Longest == nil {
		g.Longest = []GroupState{}
	}
}

// Delivery is an inbox's delivery control as the admin API shows it:
// counts, ordering, partitions and rate.
type Delivery struct {
	Source string `json:"source"`
	Counts
	// OrderBy are the key sources of the groups; none when unordered.
	OrderBy []string `json:"order_by"`
	// Groups are the groups with events pending, when OrderBy is set.
	Groups *Groups `json:"groups,omitempty"`
	// Partitions is the number of the source's streams.
	Partitions int `json:"partitions"`
	// Rate is the rate limit, when there is one.
	Rate *RateState `json:"rate,omitempty"`
}

// Delivery reads the inbox's delivery control, with up to groups of its
// longest-waiting groups.
func (ib *Inbox) Delivery(ctx context.Context, groups int) (Delivery, error) {
	c, err := ib.q.counts(ctx)
	if err != nil {
		return Delivery{}, err
	}
	d := Delivery{Source: ib.cfg.Source, Counts: c, OrderBy: slices.Clone(ib.cfg.OrderBy), Partitions: max(ib.cfg.Partitions, 1)}
	if d.OrderBy == nil {
		d.OrderBy = []string{}
	}
	if len(ib.cfg.OrderBy) > 0 {
		g, err := ib.q.groups(ctx, groups)
		if err != nil {
			return Delivery{}, err
		}
		d.Groups = &g
	}
	if ib.limit != nil {
		st, err := ib.limit.state(ctx)
		if err != nil {
			return Delivery{}, err
		}
		d.Rate = &st
	}
	return d, nil
}
