package inbox

import (
	"context"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// queue is a store's side of an inbox: the accepted events of one source,
// those waiting for a retry or behind the head of their group, and the
// dead letters. Every method is one round trip (or a few) to the store,
// bounded by its timeout. A queue is read in lanes (the partitions of a
// Redis inbox, the one queue of a file store), each by a loop of its own.
type queue interface {
	// accept stores ev, in group ("" for none), and completes key (and
	// its guard, or takes its note, see Inbox.Accept) with record, kept
	// for the accept ttl, in one round trip; or reports the key's state as
	// a claim does. It returns the stored event's id.
	accept(ctx context.Context, c store.Claim, record []byte, ev *event.Request, group string) (store.ClaimResult, string, error)
	// lanes returns the lanes that have no reader yet.
	lanes() []int
	// retired reports whether a lane is not to be read now.
	retired(lane int) bool
	// refresh looks for lanes to read besides this configuration's (the
	// partitions of another configuration, still holding events).
	refresh(ctx context.Context) error
	// next returns up to n events of a lane to deliver, in order, waiting
	// up to wait for one (not at all when wait is negative); none when
	// none came.
	next(ctx context.Context, lane int, n int, wait time.Duration) ([]message, error)
	// reclaimable returns the lanes holding an event that has been in
	// delivery for longer than minIdle (its worker died).
	reclaimable(ctx context.Context, minIdle time.Duration) ([]int, error)
	// reclaim takes over an event of lane that has been in delivery for
	// longer than minIdle; false when there is none.
	reclaim(ctx context.Context, lane int, minIdle time.Duration) (message, bool, error)
	// touch tells that the worker holding msgs (read from one lane) is
	// alive, so they are not reclaimed while they wait for the rate limit.
	touch(ctx context.Context, msgs []message) error
	// moveDue makes the retries due by now deliverable again.
	moveDue(ctx context.Context, now time.Time) error
	// delivered removes a delivered event and shortens its key to ttl: its
	// duplicates are answered for ttl from now. The next event of its
	// group becomes deliverable.
	delivered(ctx context.Context, m message, ttl time.Duration) error
	// schedule records a failed attempt and schedules the next one at due;
	// the event stays the head of its group.
	schedule(ctx context.Context, m message, attempts, status int, reason string, due time.Time) error
	// deadLetter moves an event to the dead letters; the next event of its
	// group becomes deliverable, carrying the dead letter's id.
	deadLetter(ctx context.Context, m message, attempts, status int, reason string, failed time.Time) error
	// counts returns the number of events in each state.
	counts(ctx context.Context) (Counts, error)
	// groups returns the groups with events pending, up to count of the
	// longest waiting.
	groups(ctx context.Context, count int) (Groups, error)
	// dead returns up to count dead letters, oldest first, from the id
	// start on ("-" for the first).
	dead(ctx context.Context, start string, count int64) ([]Event, error)
	// newestDead returns the id of the newest dead letter; false when
	// there is none.
	newestDead(ctx context.Context) (string, bool, error)
	// redeliver moves a dead letter back into the queue, behind the
	// pending events of its group, with a fresh retry schedule, and
	// returns its new id (ErrNoDeadEvent when there is none).
	redeliver(ctx context.Context, id string) (string, error)
	// discard deletes a dead letter; it reports whether there was one.
	discard(ctx context.Context, id string) (bool, error)
	// enqueue adds an event, in group, as a new delivery and returns its
	// id.
	enqueue(ctx context.Context, ev *event.Request, group string) (string, error)
	// limiter returns the limiter of the source's deliveries at rate: one
	// shared by every instance on the store, or the process's own.
	limiter(r Rate) limiter
	// close releases what the queue holds of its store; started tells
	// whether the workers ran (and left state behind to tidy).
	close(started bool)
}

// message is an event handed to a worker.
type message struct {
	lane int // the lane it was read from
	id   string
	ev   Event
	// deliveries is the number of times the queue has handed this entry
	// out, this time included: more than one means workers died
	// delivering it.
	deliveries int64
}

// Event is an inbox event: the stored request and its delivery state.
type Event struct {
	event.Request
	ID         string
	Attempts   int // attempts made so far
	Base       int // attempts made before the last redelivery
	LastStatus int
	LastError  string
	Failed     time.Time // when it was dead-lettered
	// Suspected is the store key the same signed bytes were accepted
	// under first (replay_guard flag); "" when none.
	Suspected string
	// Group is the event's group value (order_by); "" when unordered.
	Group string
	// OrderBroken is the id of the dead letter that was the head of the
	// event's group before it; "" when none.
	OrderBroken string
}

// Counts is the number of a source's events in each state.
type Counts struct {
	Pending   int64 `json:"pending"`   // waiting for or in delivery
	Scheduled int64 `json:"scheduled"` // waiting for a retry
	Dead      int64 `json:"dead"`      // dead-lettered
}

// DeadLetter is one dead-lettered event, as the admin API lists it: its
// URI and headers with their secrets redacted.
type DeadLetter struct {
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
