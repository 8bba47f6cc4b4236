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
	// accept stores ev, with the extra fields (name, value pairs), in
	// the queue of each destination of to (this queue's first, the others
	// of the same store), and completes key (and its guard, or takes its
	// note, see Inbox.Accept) with record, kept for the accept ttl, in one
	// round trip (a few on Redis Cluster); or reports the key's state as a
	// claim does. It returns what became of the event in each queue.
	accept(ctx context.Context, c store.Claim, record []byte, ev *event.Request, extra []any, to []admission) (store.ClaimResult, []admitted, error)
	// acceptBatch is accept for the items of one request, in one round
	// trip: the file store's one commit, one script on a Redis node. It
	// returns each item's result and what became of its event, in the
	// order of items; false (and nothing done) where the store cannot
	// (Redis Cluster, whose keys are on several nodes; a store with
	// replicas, which accepts each event once they have it; a claim with
	// a guard). With an error an item may still have been stored (a
	// script that failed half-way): the provider's retry finds it accepted.
	acceptBatch(ctx context.Context, items []acceptance) ([]store.ClaimResult, [][]admitted, bool, error)
	// setTTLs sets the ttls of an accepted key and of a note, once every
	// destination of the source is known.
	setTTLs(acceptTTL, noteTTL time.Duration)
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
	// delivered removes a delivered event (or one ended without delivery,
	// stale) as done says: its key shortened, its record replaced, its
	// group's newest value set. The next event of its group becomes
	// deliverable.
	delivered(ctx context.Context, m message, done done) error
	// newest returns the largest newer_than value the group of m has
	// delivered, "" for none.
	newest(ctx context.Context, m message) (string, error)
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
	// enqueue adds an event, in group, with the extra fields, as a new
	// delivery and returns its id.
	enqueue(ctx context.Context, ev *event.Request, group string, extra []any) (string, error)
	// limiter returns the limiter of the source's deliveries at rate: one
	// shared by every instance on the store, or the process's own.
	limiter(r Rate) limiter
	// control returns the destination's pause and breaker state in the
	// store (control.go).
	control() control
	// destinations records the source's routes (id to URL) in the store
	// and returns every route recorded there, those of other
	// configurations included (destination.go).
	destinations(ctx context.Context, routes map[string]string) (map[string]string, error)
	// forgetDestination removes a route from the record of the source's
	// routes.
	forgetDestination(ctx context.Context, id string) error
	// attempts returns the histories of the source's events
	// (attempts.go). delivered, schedule and deadLetter record m.logged,
	// when set, with the outcome.
	attempts() attemptLog
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
	// answer waits for this attempt, the first, made as the event was
	// accepted (respond app within); nil for any other. Such an event is
	// in delivery without a reader having read it (admission.answer).
	answer *Answer
	// probe marks the one attempt a destination's open breaker lets
	// through.
	probe bool
	// logged is the attempt just made, recorded in the event's history
	// with its outcome; nil for none.
	logged *logged
}

// admission is an event's place in one destination's queue, for accept.
type admission struct {
	q     queue
	group string // its group there, "" for none
	// answer, when not zero, stores the event as in delivery by the
	// accepting worker, if it may be delivered now (not held behind its
	// group): its first attempt is made at once, and another worker takes
	// it over from answer on.
	answer time.Time
}

// acceptance is an event to accept (queue.accept's arguments).
type acceptance struct {
	c      store.Claim
	record []byte
	ev     *event.Request
	extra  []any
	to     []admission
}

// admitted is what became of an event in one destination's queue.
type admitted struct {
	id   string
	lane int
	// answering is true when it is in delivery for the attempt at
	// acceptance (admission.answer).
	answering bool
	// suspected is the key its signed bytes came under first (the
	// replay guard's note); "" for none.
	suspected string
}

// done is how a delivery ends in the store.
type done struct {
	// ttl is how long the key answers duplicates from now; 0 leaves its
	// expiry as it is (an event that other destinations still deliver).
	ttl time.Duration
	// record replaces the key's record (the application's answer, respond
	// app within), the key's guard's with it; nil for none.
	record []byte
	guard  string
	// newest is the event's newer_than value, now the largest its group
	// has delivered, kept for newestTTL; "" for none.
	newest    string
	newestTTL time.Duration
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
	// Newer is its newer_than value; "" for none.
	Newer string
	// Fanout is the number of destinations it went to, 0 or 1 for one.
	Fanout int
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
	ID string `json:"id"`
	// Destination is where it was to be delivered (its URL, redacted).
	Destination string      `json:"destination"`
	Key         string      `json:"key"`
	Method      string      `json:"method"`
	URI         string      `json:"uri"`
	Headers     http.Header `json:"headers"`
	Attempts    int         `json:"attempts"`
	LastStatus  int         `json:"last_status"`
	LastError   string      `json:"last_error"`
	Received    time.Time   `json:"received"`
	Failed      time.Time   `json:"failed"`
	// Body is the event's body, redacted as the archive redacts one
	// (base64 with BodyEncoding when it is not UTF-8); BodyOmitted says
	// why it is not shown, BodyRedacted that values of it were redacted.
	Body         *string `json:"body,omitempty"`
	BodyEncoding string  `json:"body_encoding,omitempty"`
	BodyRedacted bool    `json:"body_redacted,omitempty"`
	BodyOmitted  string  `json:"body_omitted,omitempty"`
	// History is the event's attempts, at every destination, with the
	// answers' headers and bodies (docs/inbox.md#attempts).
	History *event.HistoryView `json:"history,omitempty"`
	// TraceID is the trace of the request that accepted the event, when
	// it was traced (docs/operating.md: Traces).
	TraceID string `json:"trace_id,omitempty"`
}
