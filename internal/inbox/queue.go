package inbox

import (
	"context"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// queue is a store's side of an inbox: the accepted events of one source,
// those waiting for a retry, and the dead letters. Every method is one
// round trip (or a few) to the store, bounded by its timeout.
type queue interface {
	// accept stores ev and completes key (and its guard, or takes its
	// note, see Inbox.Accept) with record, kept for the accept ttl, in one
	// round trip; or reports the key's state as a claim does. It returns
	// the stored event's id.
	accept(ctx context.Context, key, guard string, noted bool, owner string, record []byte, ev *event.Request) (store.ClaimResult, string, error)
	// next returns the next event to deliver, waiting up to wait for one;
	// false when none came.
	next(ctx context.Context, wait time.Duration) (message, bool, error)
	// reclaim returns an event that has been in delivery for longer than
	// minIdle (its worker died); false when there is none.
	reclaim(ctx context.Context, minIdle time.Duration) (message, bool, error)
	// moveDue makes the retries due by now deliverable again.
	moveDue(ctx context.Context, now time.Time) error
	// delivered removes a delivered event and shortens its key to ttl: its
	// duplicates are answered for ttl from now.
	delivered(ctx context.Context, m message, ttl time.Duration) error
	// schedule records a failed attempt and schedules the next one at due.
	schedule(ctx context.Context, m message, attempts, status int, reason string, due time.Time) error
	// deadLetter moves an event to the dead letters.
	deadLetter(ctx context.Context, m message, attempts, status int, reason string, failed time.Time) error
	// counts returns the number of events in each state.
	counts(ctx context.Context) (Counts, error)
	// dead returns up to count dead letters, oldest first, from the id
	// start on ("-" for the first).
	dead(ctx context.Context, start string, count int64) ([]Event, error)
	// newestDead returns the id of the newest dead letter; false when
	// there is none.
	newestDead(ctx context.Context) (string, bool, error)
	// redeliver moves a dead letter back into the queue with a fresh retry
	// schedule and returns its new id (errNoDeadEvent when there is none).
	redeliver(ctx context.Context, id string) (string, error)
	// discard deletes a dead letter; it reports whether there was one.
	discard(ctx context.Context, id string) (bool, error)
	// enqueue adds an event as a new delivery and returns its id.
	enqueue(ctx context.Context, ev *event.Request) (string, error)
	// close releases what the queue holds of its store; started tells
	// whether the workers ran (and left state behind to tidy).
	close(started bool)
}

// message is an event handed to a worker.
type message struct {
	id string
	ev Event
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
