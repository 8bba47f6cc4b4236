package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// Sink enters a recovered event into the route as if its provider had
// delivered it: the route's inbox (InboxSink), or the archive's
// redeliver_to (RedeliverSink). Entering claims the event's key the way a
// delivery does, in the same round trip as the entry, so an event whose
// key the route completed, accepted, or is processing right now (a
// delivery in flight, the provider's own retry) is not entered: it is
// taken once, by whichever comes first.
type Sink interface {
	// Enter takes ev (ev.StoreKey its key, bodyHash its body's SHA-256)
	// unless the route has its key already. An error leaves the key as
	// it was: the next pass tries again.
	Enter(ctx context.Context, ev *event.Request, bodyHash *[32]byte) (Entry, error)
}

// Entry is what became of an event given to a sink.
type Entry struct {
	// Entered is true when the sink took the event now; false when its
	// key was in flight or completed already.
	Entered bool
	// Status is the answer that took it: the inbox's respond, or
	// redeliver_to's.
	Status int
}

// Acceptor is the inbox's acceptance, as *inbox.Inbox implements it: the
// event and its key stored in one round trip, or the key's state when it
// is taken.
type Acceptor interface {
	Accept(ctx context.Context, c store.Claim, bodyHash *[32]byte, ev *event.Request) (store.ClaimResult, error)
	Respond() (status int, body, contentType string)
}

// InboxSink enters events into the route's inbox, which delivers them to
// the application with its retries, order and dead letters.
type InboxSink struct {
	Inbox Acceptor
}

// Enter implements Sink.
func (s InboxSink) Enter(ctx context.Context, ev *event.Request, bodyHash *[32]byte) (Entry, error) {
	res, err := s.Inbox.Accept(ctx, store.Claim{Key: ev.StoreKey, Owner: store.NewOwner()}, bodyHash, ev)
	if err != nil {
		return Entry{}, err
	}
	if res.State != store.StateClaimed {
		return Entry{}, nil
	}
	status, _, _ := s.Inbox.Respond()
	return Entry{Entered: true, Status: status}, nil
}

// RedeliverSink sends events to the archive's redeliver_to, the
// application itself, as the route's dedup mode sends a delivery to it:
// the key claimed first, then one attempt, and the key completed with the
// application's answer when it is a 2xx (later duplicates are answered
// with it), released otherwise (the next pass tries again).
type RedeliverSink struct {
	// URL is redeliver_to.
	URL string
	// Namespace is the route's key namespace, added to Webhook-Via
	// (docs/inbox.md: Loops).
	Namespace string
	// Store is the route's store.
	Store store.Store
	// TTL is the route's ttl: how long the completed key answers
	// duplicates.
	TTL time.Duration
	// MaxResponse bounds the recorded answer's body (the route's
	// max_response); a larger one is recorded without its body.
	MaxResponse int64
	// Client sends the attempts; nil for one with a 10 s timeout that
	// follows no redirect, as the archive's redeliveries are sent.
	Client *http.Client
	// Prepare, when set, prepares each attempt for the application as the
	// route forwards (internal/forward): its signature kept, re-signed,
	// replaced or removed, and the route's outbound headers.
	Prepare func(r *http.Request, ev *event.Request) error
}

// redeliverTimeout bounds one attempt to redeliver_to, as an archived
// event's redelivery is bounded (docs/archive.md: Redelivery).
const redeliverTimeout = 10 * time.Second

var defaultRedeliverClient = &http.Client{
	Timeout:       redeliverTimeout,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// Enter implements Sink.
func (s *RedeliverSink) Enter(ctx context.Context, ev *event.Request, bodyHash *[32]byte) (Entry, error) {
	owner := store.NewOwner()
	// the claim outlives the attempt, so no other delivery of the key
	// runs meanwhile
	res, err := s.Store.Claim(ctx, ev.StoreKey, owner, 3*redeliverTimeout)
	if err != nil {
		return Entry{}, err
	}
	if res.State != store.StateClaimed {
		return Entry{}, nil
	}
	rec, status, err := s.post(ctx, ev, bodyHash)
	if err != nil {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
		defer cancel()
		if rerr := s.Store.Release(rctx, ev.StoreKey, owner); rerr != nil && !errors.Is(rerr, store.ErrNotOwner) {
			return Entry{}, fmt.Errorf("%v; releasing its key: %v", err, rerr)
		}
		return Entry{}, err
	}
	if err := s.Store.Complete(ctx, ev.StoreKey, owner, rec, s.TTL); err != nil {
		return Entry{}, fmt.Errorf("redeliver_to answered %d, but completing the key failed: %w", status, err)
	}
	return Entry{Entered: true, Status: status}, nil
}

// post sends one attempt and returns the record of a 2xx answer.
func (s *RedeliverSink) post(ctx context.Context, ev *event.Request, bodyHash *[32]byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, redeliverTimeout)
	defer cancel()
	req, err := ev.NewRequest(ctx, s.URL)
	if err != nil {
		return nil, 0, err
	}
	for _, name := range []string{"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto"} {
		if req.Header.Get(name) == "" {
			req.Header.Del(name) // a recovered event came from no client
		}
	}
	event.AddVia(req.Header, s.Namespace)
	if s.Prepare != nil {
		if err := s.Prepare(req, ev); err != nil {
			return nil, 0, err
		}
	}
	client := s.Client
	if client == nil {
		client = defaultRedeliverClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("redeliver_to: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return nil, resp.StatusCode, fmt.Errorf("redeliver_to answered %s", resp.Status)
	}
	limit := s.MaxResponse
	if limit <= 0 {
		limit = 1 << 20
	}
	rec := record.Encode(nil, resp.StatusCode, resp.Header, bodyHash)
	// the application took the event: its key is completed whatever
	// becomes of reading the answer's body
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil || int64(len(body)) > limit {
		record.MarkNoBody(rec)
		return rec, resp.StatusCode, nil
	}
	return append(rec, body...), resp.StatusCode, nil
}

// Interface guards
var (
	_ Sink = InboxSink{}
	_ Sink = (*RedeliverSink)(nil)
)
