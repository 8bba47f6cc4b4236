package inbox

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// The application's own answer (docs/inbox.md#the-applications-answer).
// With `respond app within`, an event is stored as usual, but as in
// delivery by the instance that accepted it, which makes its first attempt
// at once; the provider waits for that attempt up to the deadline. A 2xx
// within it becomes the key's record, recorded as the event is marked
// delivered and before the provider gets it, so that its duplicates are
// answered with it; anything else, or nothing by the deadline, and the
// provider gets respond while the event goes on as usual. An attempt that
// answers 2xx after the deadline still delivers the event; the key keeps
// respond, the answer the provider had. Should the accepting instance die
// during the attempt, the event is taken over as any event whose worker
// died.

// Answer is the attempt at acceptance of an event, which the handler
// waits for.
type Answer struct {
	start    time.Time
	bodyHash [32]byte
	guard    string // the claim's completion guard: its record is replaced too
	maxBody  int64
	inbox    *Inbox // the destination attempted

	mu       sync.Mutex
	late     bool   // the provider was answered respond: the record stays
	taken    bool   // the application's answer is being recorded
	captured []byte // the application's 2xx answer as a record; nil for none
	recorded []byte // the record that replaced respond
	done     chan struct{}
	once     sync.Once
}

// AcceptAnswering is Accept for a route with `respond app within`: when
// the event can be delivered now to its first destination (not held
// behind its group, the destination neither paused nor broken, a delivery
// slot free, and a moment of its rate free now), it is stored as in
// delivery and its first attempt starts at once; Answer waits for it.
// Otherwise, and for a key that was not new, the Answer is nil and the
// event was accepted (or not) as Accept does.
func (ib *Inbox) AcceptAnswering(ctx context.Context, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, *Answer, error) {
	first := ib.targets(ev)[0]
	if !first.reserveAttempt(ctx) {
		res, err := ib.Accept(ctx, c, bodyHash, ev)
		return res, nil, err
	}
	a := &Answer{start: time.Now(), bodyHash: *bodyHash, guard: c.CompletionGuard(), maxBody: ib.cfg.MaxAnswer, inbox: first, done: make(chan struct{})}
	res, ids, err := ib.accept(ctx, c, bodyHash, ev, first)
	if err != nil || res.State != store.StateClaimed || !ids[0].answering {
		first.releaseAttempt()
		return res, nil, err
	}
	stored := *ev
	stored.Body = bytes.Clone(ev.Body) // the handler's buffer goes back to its pool
	m := message{lane: ids[0].lane, id: ids[0].id, deliveries: 1, answer: a, ev: Event{
		Request: stored, ID: ids[0].id, Group: first.groupOf(ev), Suspected: ids[0].suspected,
		Newer: ib.newerOf(ev), Fanout: len(ids),
	}}
	go first.deliver(m)
	return res, a, nil
}

// newerOf is an event's newer_than value, "" for none.
func (ib *Inbox) newerOf(ev *event.Request) string {
	if ib.cfg.NewerThan == nil {
		return ""
	}
	return ib.cfg.NewerThan(ev)
}

// reserveAttempt takes what an attempt at acceptance needs: running
// workers (their wait group holds the attempt), a free slot among the
// concurrency ones of attempts at acceptance (apart from the workers',
// which an idle reader holds while it waits for events), a gate that lets
// deliveries through and, with a rate, a moment now (a moment found later
// is not used).
func (ib *Inbox) reserveAttempt(ctx context.Context) bool {
	if ib.gate.passage(time.Now()) != passAll {
		return false
	}
	ib.mu.Lock()
	if !ib.started || ib.stopped {
		ib.mu.Unlock()
		return false
	}
	ib.wg.Add(1)
	ib.mu.Unlock()
	select {
	case ib.answering <- struct{}{}:
	default:
		ib.wg.Done()
		return false
	}
	if ib.limit != nil {
		if wait, _, err := ib.limit.reserve(ctx, 1); err != nil || wait > 0 {
			ib.releaseAttempt()
			return false
		}
	}
	return true
}

// releaseAttempt gives back what reserveAttempt took.
func (ib *Inbox) releaseAttempt() {
	<-ib.answering
	ib.wg.Done()
}

// releaseSlot gives back the slot of m's delivery: a worker's, or that of
// an attempt at acceptance.
func (ib *Inbox) releaseSlot(m message) {
	if m.answer != nil {
		<-ib.answering
		return
	}
	<-ib.slots
}

// Wait waits for the application's answer up to the deadline, d from the
// acceptance, or until ctx ends, and returns it as a record: nil when the
// provider is to get respond.
func (a *Answer) Wait(ctx context.Context, d time.Duration) []byte {
	t := time.NewTimer(time.Until(a.start.Add(d)))
	defer t.Stop()
	select {
	case <-a.done:
	case <-t.C:
	case <-ctx.Done():
	}
	a.mu.Lock()
	if !a.taken {
		a.late = true
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	// the answer came in time and is being recorded: its fate decides
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.recorded
}

// read captures the application's answer to the attempt: a 2xx, with its
// body up to maxBody, as the record that would replace respond.
func (a *Answer) read(resp *http.Response) []byte {
	a.inbox.metrics.answer.Observe(time.Since(a.start).Seconds())
	body, err := io.ReadAll(io.LimitReader(resp.Body, a.maxBody+1))
	if err != nil || int64(len(body)) > a.maxBody || resp.StatusCode < 200 || resp.StatusCode > 299 {
		return body
	}
	rec := append(record.Encode(make([]byte, 0, 256+len(body)), resp.StatusCode, resp.Header, &a.bodyHash), body...)
	a.mu.Lock()
	a.captured = rec
	a.mu.Unlock()
	return body
}

// take returns the application's answer to record, unless the provider
// was answered respond already; from then on Wait waits for the outcome.
func (a *Answer) take() []byte {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.late || a.captured == nil {
		return nil
	}
	a.taken = true
	return a.captured
}

// recordedAs tells that rec replaced respond as the key's record.
func (a *Answer) recordedAs(rec []byte) {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.recorded = rec
	a.mu.Unlock()
}

// finish ends the wait, once the attempt's outcome is recorded.
func (a *Answer) finish() {
	if a == nil {
		return
	}
	a.once.Do(func() { close(a.done) })
}
