package inbox

import (
	"context"
	"encoding/base64"
	"errors"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
)

// What the admin API reads and does: counts, dead letters, redelivery.

// ErrNoDeadEvent is returned for a dead letter id that is not one.
var ErrNoDeadEvent = errors.New("no dead-lettered event with this id")

// ErrNoDestination is returned for a destination the source does not
// have.
var ErrNoDestination = errors.New("no such destination")

// ErrAmbiguousDeadEvent is returned for a dead letter id that several
// destinations have: the destination must be given.
var ErrAmbiguousDeadEvent = errors.New("dead letters of several destinations have this id: give the destination")

// Counts reads the number of events in each state, over every
// destination.
func (ib *Inbox) Counts(ctx context.Context) (Counts, error) {
	var total Counts
	for _, d := range ib.all() {
		c, err := d.q.counts(ctx)
		if err != nil {
			return Counts{}, err
		}
		total.Pending += c.Pending
		total.Scheduled += c.Scheduled
		total.Dead += c.Dead
	}
	return total, nil
}

// destinationsOf returns the inbox of destination ("" for every one), or
// ErrNoDestination.
func (ib *Inbox) destinationsOf(destination string) ([]*Inbox, error) {
	if destination == "" {
		return ib.all(), nil
	}
	d := ib.destination(destination)
	if d == nil {
		return nil, ErrNoDestination
	}
	return []*Inbox{d}, nil
}

// DeadLetters lists up to count dead-lettered events of destination (""
// for every one), oldest first, from the id start on ("-" for the first),
// redacted as the archive stores events.
func (ib *Inbox) DeadLetters(ctx context.Context, destination, start string, count int64) ([]DeadLetter, error) {
	dests, err := ib.destinationsOf(destination)
	if err != nil {
		return nil, err
	}
	return ib.deadLetters(ctx, dests, start, count)
}

// DeadLetter returns the dead letter id of destination ("" for whichever
// has it), shown as DeadLetters shows it: ErrNoDeadEvent when id is not a
// dead letter, ErrAmbiguousDeadEvent when several destinations have it.
func (ib *Inbox) DeadLetter(ctx context.Context, destination, id string) (DeadLetter, error) {
	d, err := ib.deadOwner(ctx, destination, id)
	if err != nil {
		return DeadLetter{}, err
	}
	out, err := ib.deadLetters(ctx, []*Inbox{d}, id, 1)
	if err != nil {
		return DeadLetter{}, err
	}
	if len(out) == 0 || out[0].ID != id {
		return DeadLetter{}, ErrNoDeadEvent
	}
	return out[0], nil
}

// deadLetters is DeadLetters for the inboxes of dests.
func (ib *Inbox) deadLetters(ctx context.Context, dests []*Inbox, start string, count int64) ([]DeadLetter, error) {
	var out []DeadLetter
	for _, d := range dests {
		evs, err := d.q.dead(ctx, start, count)
		if err != nil {
			return nil, err
		}
		for _, ev := range evs {
			out = append(out, DeadLetter{
				ID:          ev.ID,
				Destination: d.cfg.Redact.URI(d.dest.url),
				Key:         ev.Key,
				Method:      ev.Method,
				URI:         ib.cfg.Redact.URI(ev.URI),
				Headers:     ib.cfg.Redact.Header(event.ParseHeaderBlock(ev.Headers)),
				Attempts:    ev.Attempts,
				LastStatus:  ev.LastStatus,
				LastError:   ev.LastError,
				Received:    ev.Received,
				Failed:      ev.Failed,
				TraceID:     ev.Trace.TraceID(),
			})
			ib.showBody(&out[len(out)-1], ev.Body)
		}
	}
	if len(dests) > 1 {
		slices.SortStableFunc(out, func(a, b DeadLetter) int { return event.CompareIDs(a.ID, b.ID) })
		if int64(len(out)) > count {
			out = out[:count]
		}
	}
	keys := make([]string, len(out))
	for i := range out {
		keys[i] = out[i].Key
	}
	hs, err := ib.Attempts(ctx, keys...)
	if err != nil {
		return nil, err
	}
	for i, h := range hs {
		out[i].History = event.ShowHistory(h, true)
	}
	return out, nil
}

// showBody sets a dead letter's body as the admin API shows it: redacted
// by the archive's rules, or left out saying why.
func (ib *Inbox) showBody(dl *DeadLetter, body []byte) {
	shown, changed, err := ib.cfg.Redact.Body(body)
	switch {
	case errors.Is(err, redact.ErrNotStrictJSON):
		dl.BodyOmitted = err.Error()
		return
	case err != nil:
		dl.BodyOmitted = "redaction failed: " + err.Error()
		return
	}
	s := string(shown)
	if !utf8.ValidString(s) {
		s, dl.BodyEncoding = base64.StdEncoding.EncodeToString(shown), "base64"
	}
	dl.Body, dl.BodyRedacted = &s, changed
}

// deadOwner returns the inbox of destination ("" for any) holding the
// dead letter id: ErrNoDeadEvent when none does, ErrAmbiguousDeadEvent
// when several do.
func (ib *Inbox) deadOwner(ctx context.Context, destination, id string) (*Inbox, error) {
	dests, err := ib.destinationsOf(destination)
	if err != nil || len(dests) == 1 {
		return firstOf(dests), err
	}
	var found *Inbox
	for _, d := range dests {
		evs, err := d.q.dead(ctx, id, 1)
		if err != nil {
			return nil, err
		}
		if len(evs) == 1 && evs[0].ID == id {
			if found != nil {
				return nil, ErrAmbiguousDeadEvent
			}
			found = d
		}
	}
	if found == nil {
		return nil, ErrNoDeadEvent
	}
	return found, nil
}

func firstOf(dests []*Inbox) *Inbox {
	if len(dests) == 0 {
		return nil
	}
	return dests[0]
}

// Redeliver moves a dead-lettered event of destination ("" for whichever
// has it) back into its queue, with a fresh retry schedule, and returns
// its new id; ErrNoDeadEvent when id is not a dead letter.
func (ib *Inbox) Redeliver(ctx context.Context, destination, id string) (string, error) {
	d, err := ib.deadOwner(ctx, destination, id)
	if err != nil {
		return "", err
	}
	return d.q.redeliver(ctx, id)
}

// RedeliverAll moves every event dead-lettered so far for destination (""
// for every one) back into its queue, a page at a time, and returns how
// many it moved. Events that die again meanwhile stay dead: the loop ends.
func (ib *Inbox) RedeliverAll(ctx context.Context, destination string) (int, error) {
	dests, err := ib.destinationsOf(destination)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range dests {
		m, err := d.redeliverAll(ctx)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// redeliverAll is RedeliverAll for one destination.
func (ib *Inbox) redeliverAll(ctx context.Context) (int, error) {
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

// Discard deletes a dead-lettered event of destination ("" for whichever
// has it); it reports whether there was one.
func (ib *Inbox) Discard(ctx context.Context, destination, id string) (bool, error) {
	d, err := ib.deadOwner(ctx, destination, id)
	if errors.Is(err, ErrNoDeadEvent) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return d.q.discard(ctx, id)
}

// Enqueue adds an event (an archived delivery, redelivered) to the queue
// of each of its destinations as a new delivery, with a fresh retry
// schedule, behind the pending events of its group, and returns its id in
// the first.
func (ib *Inbox) Enqueue(ctx context.Context, ev *event.Request) (string, error) {
	var first string
	targets := ib.targets(ev)
	extra := ib.extraFields(ev, len(targets))
	for i, d := range targets {
		id, err := d.q.enqueue(ctx, ev, d.groupOf(ev), extra)
		if err != nil {
			return first, err
		}
		if i == 0 {
			first = id
		}
	}
	return first, nil
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

// Delivery is an inbox's delivery control as the admin API shows it: the
// counts of every destination; deliver_to's ordering, partitions and rate;
// whether the source is paused; and each destination's own.
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
	// Paused tells whether the whole source is paused.
	Paused bool `json:"paused"`
	// Destinations are the source's destinations, deliver_to's first.
	Destinations []DestinationDelivery `json:"destinations"`
}

// Destination is one destination of a source's events as the admin API
// shows it: where, for which events, paused or not, its breaker, its
// counts.
type Destination struct {
	// URL is where its events go, redacted as the archive redacts URIs.
	URL string `json:"url"`
	// ID names it (in the store, and `?destination=`).
	ID string `json:"id"`
	// Route is the rule of the route it is the destination of; none for
	// deliver_to.
	Route string `json:"route,omitempty"`
	// Orphaned marks the destination of a route no longer configured,
	// delivered until its queue is empty.
	Orphaned bool `json:"orphaned,omitempty"`
	// Paused tells whether its deliveries are paused (the destination, or
	// the whole source).
	Paused bool `json:"paused"`
	// Breaker is its breaker, when the inbox has one.
	Breaker *BreakerState `json:"breaker,omitempty"`
	Counts
}

// DestinationDelivery is a destination with its delivery control.
type DestinationDelivery struct {
	Destination
	OrderBy []string   `json:"order_by"`
	Groups  *Groups    `json:"groups,omitempty"`
	Rate    *RateState `json:"rate,omitempty"`
}

// Paused reads whether the whole source is paused.
func (ib *Inbox) Paused(ctx context.Context) (bool, error) {
	st, err := ib.ctl.read(ctx, nil)
	return st.sourcePaused, err
}

// Destinations reads the source's destinations, deliver_to's first.
func (ib *Inbox) Destinations(ctx context.Context) ([]Destination, error) {
	var out []Destination
	for _, d := range ib.all() {
		v, err := d.view(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// view reads a destination's state.
func (ib *Inbox) view(ctx context.Context) (Destination, error) {
	var b *Breaker
	if ib.cfg.Breaker.Of > 0 {
		b = &ib.cfg.Breaker
	}
	st, err := ib.ctl.read(ctx, b)
	if err != nil {
		return Destination{}, err
	}
	c, err := ib.q.counts(ctx)
	if err != nil {
		return Destination{}, err
	}
	v := Destination{URL: ib.cfg.Redact.URI(ib.dest.url), ID: ib.dest.id, Route: ib.dest.rule, Orphaned: ib.dest.orphan,
		Paused: st.sourcePaused || st.paused, Counts: c}
	if b != nil {
		v.Breaker = &st.breaker
	}
	return v, nil
}

// Delivery reads the inbox's delivery control, with up to groups of the
// longest-waiting groups of each destination.
func (ib *Inbox) Delivery(ctx context.Context, groups int) (Delivery, error) {
	d := Delivery{Source: ib.cfg.Source, Partitions: max(ib.cfg.Partitions, 1)}
	for _, x := range ib.all() {
		v, err := x.view(ctx)
		if err != nil {
			return Delivery{}, err
		}
		dd := DestinationDelivery{Destination: v, OrderBy: slices.Clone(x.cfg.OrderBy)}
		if dd.OrderBy == nil {
			dd.OrderBy = []string{}
		}
		if len(x.cfg.OrderBy) > 0 {
			g, err := x.q.groups(ctx, groups)
			if err != nil {
				return Delivery{}, err
			}
			dd.Groups = &g
		}
		if x.limit != nil {
			st, err := x.limit.state(ctx)
			if err != nil {
				return Delivery{}, err
			}
			dd.Rate = &st
		}
		d.Pending += v.Pending
		d.Scheduled += v.Scheduled
		d.Dead += v.Dead
		d.Destinations = append(d.Destinations, dd)
	}
	first := d.Destinations[0]
	d.OrderBy, d.Groups, d.Rate = first.OrderBy, first.Groups, first.Rate
	paused, err := ib.Paused(ctx)
	if err != nil {
		return Delivery{}, err
	}
	d.Paused = paused
	return d, nil
}
