package reconcile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// stripeServer is a scripted Stripe API for the content of a pass.
// stripe-mock checks the shape of the requests against Stripe's own API
// description (TestStripeRequestsAgainstStripeMock) but answers from fixed
// fixtures; this server holds the events a test needs and answers `GET
// /v1/events` as Stripe's API reference describes the list
// (https://docs.stripe.com/api/events/list and /api/pagination, and the
// `NotificationEventList` schema of Stripe's OpenAPI description as
// stripe-mock v0.203.0 ships it: `{"object":"list","data":[event…],
// "has_more":bool,"url":"/v1/events"}`, data "sorted, with the most recent
// … appearing first"): newest first, `limit` events after the event
// `starting_after` names, only events created at or after `created[gte]`.
// Every event it holds is undelivered (`delivery_success=false`).
type stripeServer struct {
	*httptest.Server
	t   *testing.T
	key string

	mu       sync.Mutex
	events   []stripeItem // newest first
	requests []url.Values
	// onRequest, when set, runs before request n (1 for the first) is
	// answered; a status other than 0 answers the request with it.
	onRequest func(n int, q url.Values) (status int, header http.Header)
}

// stripeItem is an event the server holds.
type stripeItem struct {
	id      string
	created int64
	raw     json.RawMessage // compact
}

func newStripeServer(t *testing.T, key string) *stripeServer {
	s := &stripeServer{t: t, key: key}
	s.Server = httptest.NewServer(s)
	t.Cleanup(s.Close)
	return s
}

// stripeEventJSON is an event object as Stripe's API returns it, compact;
// its description holds characters a re-encoding would change.
func stripeEventJSON(id string, created int64) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"id":%q,"object":"event","api_version":%q,"created":%d,`+
		`"data":{"object":{"id":"pi_%s","object":"payment_intent","amount":%d,"currency":"usd",`+
		`"description":"caf\u00e9 café <b> & </script> \"quoted\"","metadata":{},"payment_method_types":["card"],"amount_details":{"tip":{}}}},`+
		`"livemode":false,"pending_webhooks":1,"request":{"id":null,"idempotency_key":null},"type":"payment_intent.succeeded"}`,
		id, stripe.APIVersion, created, id[4:], 1000+created%1000))
}

// add adds n events created at now-age, now-age-1s, … (newest first), with
// ids evt_<prefix><i>; it returns their ids, newest first.
func (s *stripeServer) add(prefix string, n int, age time.Duration) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, n)
	top := time.Now().Add(-age).Unix()
	for i := range n {
		id := fmt.Sprintf("evt_%s%04d", prefix, i)
		ids[i] = id
		created := top - int64(i)
		s.events = append(s.events, stripeItem{id: id, created: created, raw: stripeEventJSON(id, created)})
	}
	return ids
}

// event returns the raw event with id.
func (s *stripeServer) event(id string) json.RawMessage {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.events {
		if e.id == id {
			return e.raw
		}
	}
	s.t.Fatalf("no event %s", id)
	return nil
}

// queries returns the query of every request so far.
func (s *stripeServer) queries() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.requests...)
}

func (s *stripeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.Header.Get("Authorization") != "Bearer "+s.key {
		// Stripe's answer quotes the key's last four characters
		w.WriteHeader(http.StatusUnauthorized)
		fmt.Fprintf(w, `{"error":{"message":"Invalid API Key provided: rk_test_****%s","type":"invalid_request_error"}}`, s.key[len(s.key)-4:])
		return
	}
	if r.Method != http.MethodGet || r.URL.Path != "/v1/events" {
		s.t.Errorf("stripe: unexpected %s %s", r.Method, r.URL.Path)
		w.WriteHeader(http.StatusNotFound)
		return
	}
	q := r.URL.Query()
	s.mu.Lock()
	s.requests = append(s.requests, q)
	n := len(s.requests)
	hook := s.onRequest
	s.mu.Unlock()
	if hook != nil {
		if status, h := hook(n, q); status != 0 {
			for k, v := range h {
				w.Header()[k] = v
			}
			w.WriteHeader(status)
			fmt.Fprintf(w, `{"error":{"message":"scripted %d","type":"api_error"}}`, status)
			return
		}
	}
	if q.Get("delivery_success") != "false" {
		s.t.Errorf("stripe: delivery_success=%q, want false", q.Get("delivery_success"))
	}
	gte, err := strconv.ParseInt(q.Get("created[gte]"), 10, 64)
	if err != nil {
		s.t.Errorf("stripe: created[gte]=%q: %v", q.Get("created[gte]"), err)
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit < 1 || limit > 100 {
		s.t.Errorf("stripe: limit=%q, want 1 to 100", q.Get("limit"))
		limit = 10
	}
	s.mu.Lock()
	var list []stripeItem
	for _, e := range s.events {
		if e.created >= gte {
			list = append(list, e)
		}
	}
	s.mu.Unlock()
	if after := q.Get("starting_after"); after != "" {
		i := -1
		for j, e := range list {
			if e.id == after {
				i = j
			}
		}
		if i < 0 {
			w.WriteHeader(http.StatusNotFound)
			fmt.Fprintf(w, `{"error":{"code":"resource_missing","message":"No such event: '%s'","param":"starting_after","type":"invalid_request_error"}}`, after)
			return
		}
		list = list[i+1:]
	}
	page := list[:min(limit, len(list))]
	data := make([]json.RawMessage, len(page))
	for i, e := range page {
		data[i] = e.raw
	}
	// Stripe's answers are indented by two spaces, the events nested in
	// data
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	_ = enc.Encode(map[string]any{"object": "list", "data": data, "has_more": len(list) > len(page), "url": "/v1/events"})
}

// stripeDelivery is the delivery Stripe makes of an event to the route,
// as the route stores it: the event object indented as Stripe writes a
// delivery, signed now.
func stripeDelivery(t *testing.T, raw json.RawMessage) (*event.Request, [32]byte) {
	t.Helper()
	body, err := stripeBody(raw)
	if err != nil {
		t.Fatal(err)
	}
	hr := httptest.NewRequest(http.MethodPost, "/hooks/stripe", nil)
	hr.Header.Set("Content-Type", stripeContentType)
	if body, err = signature.NewStripeSigner(endpointSecret).Sign(hr, body, time.Now()); err != nil {
		t.Fatal(err)
	}
	id := gjsonID(raw)
	ev := &event.Request{
		Source: "stripe", Key: id, StoreKey: "idem:stripe:" + id, Method: http.MethodPost, URI: "/hooks/stripe",
		Headers: event.HeaderBlock(hr.Header, event.SkipInboxHeader, nil), Body: body, Received: time.Now(),
	}
	return ev, sha256.Sum256(body)
}

func gjsonID(raw json.RawMessage) string {
	var v struct {
		ID string `json:"id"`
	}
	_ = json.Unmarshal(raw, &v)
	return v.ID
}

// stripeApp is an application that verifies every delivery with Stripe's
// own library, unchanged (stripe-go's webhook.ConstructEvent: the
// signature over the raw body, 300 s of tolerance, and the event's API
// version), and records the events it took.
type stripeApp struct {
	*app
	mu     sync.Mutex
	events map[string]int
	bodies map[string][]byte
	seen   strings.Builder // every request's headers and body
}

func newStripeApp(t *testing.T) *stripeApp {
	a := &stripeApp{events: map[string]int{}, bodies: map[string][]byte{}}
	a.app = newApp(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		a.mu.Lock()
		fmt.Fprintf(&a.seen, "%v\n%s\n", r.Header, body)
		a.mu.Unlock()
		ev, err := webhook.ConstructEvent(body, r.Header.Get("Stripe-Signature"), endpointSecret)
		if err != nil {
			t.Errorf("the application's Stripe library refused a delivery: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		a.events[ev.ID]++
		a.bodies[ev.ID] = body
		a.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"received":%q}`, ev.ID)
	})
	return a
}

// counts returns how many times the application took each event.
func (a *stripeApp) counts() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make(map[string]int, len(a.events))
	for k, v := range a.events {
		out[k] = v
	}
	return out
}

// received is every request the application got, headers and body.
func (a *stripeApp) received() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.seen.String()
}

func (a *stripeApp) body(id string) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.bodies[id]
}

// indented is raw as Stripe indents a delivery's body.
func indented(t *testing.T, raw json.RawMessage) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// liveDelivery has the route take Stripe's own delivery of an event now,
// as the handler does: the sink claims the key and takes the event in one
// step (the inbox's acceptance, or dedup mode's claim, the application,
// the completion).
func liveDelivery(t *testing.T, sink Sink, raw json.RawMessage) {
	t.Helper()
	ev, hash := stripeDelivery(t, raw)
	if _, err := sink.Enter(context.Background(), ev, &hash); err != nil {
		t.Fatalf("live delivery of %s: %v", ev.Key, err)
	}
}
