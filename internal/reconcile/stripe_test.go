package reconcile

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stripe/stripe-go/v82/webhook"
	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

const stripeKey = "rk_test_51ReconcileRestrictedKeyForTests0001"

// stripeRoute is a route under test: its store, its sink, and how to tell
// that the application got everything the route took.
type stripeRoute struct {
	name string
	open func(t *testing.T, a *stripeApp) (Store, Sink, *inbox.Inbox)
}

var stripeRoutes = []stripeRoute{
	{"inbox on the file store", func(t *testing.T, a *stripeApp) (Store, Sink, *inbox.Inbox) {
		s := newFileStore(t)
		ib := newInbox(t, s, "stripe", a.URL)
		return s, InboxSink{Inbox: ib}, ib
	}},
	{"inbox on redis", func(t *testing.T, a *stripeApp) (Store, Sink, *inbox.Inbox) {
		s := openRedisStore(t, testkit.StartRedis(t).Addr())
		ib := newInbox(t, s, "stripe", a.URL)
		return s, InboxSink{Inbox: ib}, ib
	}},
	{"redeliver_to on the file store", func(t *testing.T, a *stripeApp) (Store, Sink, *inbox.Inbox) {
		s := newFileStore(t)
		return s, &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: s, TTL: time.Hour}, nil
	}},
}

// settle waits until the application took want events, and the inbox (if
// any) holds nothing more to deliver.
func settle(t *testing.T, a *stripeApp, ib *inbox.Inbox, want int) {
	t.Helper()
	testkit.WaitFor(t, 30*time.Second, "the application takes every event", func() (bool, string) {
		got := a.counts()
		if len(got) < want {
			return false, strconv.Itoa(len(got)) + " events"
		}
		if ib == nil {
			return true, ""
		}
		c, err := ib.Counts(context.Background())
		return err == nil && c.Pending == 0 && c.Scheduled == 0, "inbox " + strconv.FormatInt(c.Pending, 10) + " pending"
	})
}

// TestStripePassEntersEveryEventOnce: a pass over several pages of
// undelivered events enters each event the route has not taken, once;
// events the route took already, an event in flight, and an event the
// provider delivers while the pass runs are not entered again; every
// delivery passes Stripe's own library; a second pass recovers nothing.
func TestStripePassEntersEveryEventOnce(t *testing.T) {
	for _, rt := range stripeRoutes {
		t.Run(rt.name, func(t *testing.T) {
			a := newStripeApp(t)
			st, sink, ib := rt.open(t, a)
			srv := newStripeServer(t, stripeKey)
			ids := srv.add("a", 230, time.Hour)
			srv.add("old", 3, 30*time.Hour) // before the lookback
			ctx := context.Background()

			// five events the route took before the pass
			for _, id := range ids[10:15] {
				liveDelivery(t, sink, srv.event(id))
			}
			// one in flight: a delivery the application is still
			// processing
			inFlight := ids[150]
			if res, err := st.Claim(ctx, "idem:stripe:"+inFlight, "live-request", time.Hour); err != nil || res.State != store.StateClaimed {
				t.Fatalf("claiming %s: %v %v", inFlight, res.State, err)
			}
			// and one Stripe delivers while the pass reads page 2 (it
			// is on page 3)
			live := ids[220]
			srv.onRequest = func(n int, _ url.Values) (int, http.Header) {
				if n == 2 {
					liveDelivery(t, sink, srv.event(live))
				}
				return 0, nil
			}

			logs := captureLogs()
			r := newReconciler(t, Config{Store: st, Sink: sink, Logger: logs.logger, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL}}, &waits{})
			start := time.Now()
			sum, err := r.Run(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Recovered != 223 || sum.Known != 7 || sum.Calls != 3 || sum.Resumed {
				t.Errorf("first pass: %+v, want 223 recovered, 7 known, 3 calls", sum)
			}
			settle(t, a, ib, 229)
			got := a.counts()
			for _, id := range ids {
				want := 1
				if id == inFlight {
					want = 0
				}
				if got[id] != want {
					t.Errorf("the application took %s %d times, want %d", id, got[id], want)
				}
			}
			if len(got) != 229 {
				t.Errorf("the application took %d events, want 229: %v", len(got), slices.Sorted(maps.Keys(got)))
			}
			// the body is the event object as Stripe writes a delivery
			if b := a.body(ids[0]); !bytes.Equal(b, indented(t, srv.event(ids[0]))) {
				t.Errorf("the application got\n%s\nwant the event re-indented:\n%s", b, indented(t, srv.event(ids[0])))
			}

			q := srv.queries()
			if len(q) != 3 {
				t.Fatalf("%d requests, want 3", len(q))
			}
			gte, _ := strconv.ParseInt(q[0].Get("created[gte]"), 10, 64)
			if want := start.Add(-24 * time.Hour).Unix(); gte < want-1 || gte > want+5 {
				t.Errorf("created[gte]=%d, want about %d (now - lookback)", gte, want)
			}
			for i, wantAfter := range []string{"", ids[99], ids[199]} {
				if q[i].Get("starting_after") != wantAfter || q[i].Get("limit") != "100" || q[i].Get("delivery_success") != "false" {
					t.Errorf("request %d: %v, want starting_after=%q", i+1, q[i], wantAfter)
				}
				if q[i].Get("created[gte]") != q[0].Get("created[gte]") {
					t.Errorf("request %d: created[gte] changed within the pass: %v", i+1, q[i])
				}
			}

			srv.onRequest = nil
			sum, err = r.Run(ctx)
			if err != nil || sum.Recovered != 0 || sum.Known != 230 {
				t.Errorf("second pass: %+v %v, want nothing recovered, 230 known", sum, err)
			}
			// the in-flight request failed: its key is released, and the
			// next pass recovers it
			if err := st.Release(ctx, "idem:stripe:"+inFlight, "live-request"); err != nil {
				t.Fatal(err)
			}
			sum, err = r.Run(ctx)
			if err != nil || sum.Recovered != 1 {
				t.Errorf("third pass: %+v %v, want the released event recovered", sum, err)
			}
			settle(t, a, ib, 230)
			if sum, err = r.Run(ctx); err != nil || sum.Recovered != 0 {
				t.Errorf("fourth pass: %+v %v, want nothing recovered", sum, err)
			}
			for id, n := range a.counts() {
				if n != 1 {
					t.Errorf("the application took %s %d times", id, n)
				}
			}
			// the key is in no log line, no stored event, no state
			assertSecretNowhere(t, stripeKey, r, st, logs, a)
		})
	}
}

// TestStripePassResumesWhereItStopped: a pass that fails part-way saves
// where it was; the next pass, on another instance sharing Redis or on the
// one instance after a restart on its file, resumes from the page after
// the last it finished, and every event reaches the application once.
func TestStripePassResumesWhereItStopped(t *testing.T) {
	for _, tc := range []struct {
		name string
		// instances returns the store of the first and of the second
		// instance (the second opened after the first is done with
		// its pass)
		instances func(t *testing.T) (first Store, second func() Store)
	}{
		{"two instances on redis", func(t *testing.T) (Store, func() Store) {
			addr := testkit.StartRedis(t).Addr()
			return openRedisStore(t, addr), func() Store { return openRedisStore(t, addr) }
		}},
		{"one instance restarted on its file", func(t *testing.T) (Store, func() Store) {
			path := filepath.Join(t.TempDir(), "store.db")
			s, closeFirst := openFileStore(t, path)
			return s, func() Store {
				closeFirst()
				s, _ := openFileStore(t, path)
				return s
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newStripeApp(t)
			srv := newStripeServer(t, stripeKey)
			ids := srv.add("r", 250, time.Hour)
			failing := true
			srv.onRequest = func(_ int, q url.Values) (int, http.Header) {
				if failing && q.Get("starting_after") == ids[199] {
					return http.StatusInternalServerError, nil
				}
				return 0, nil
			}
			first, second := tc.instances(t)
			ctx := context.Background()
			w := &waits{}
			r1 := newReconciler(t, Config{Store: first, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL},
				Sink: &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: first, TTL: time.Hour}}, w)
			sum, err := r1.Run(ctx)
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != 500 || sum.Recovered != 200 {
				t.Fatalf("first pass: %+v, %v; want 200 recovered and the 500 of page 3", sum, err)
			}
			if got, want := w.all(), []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second}; !slices.Equal(got, want) {
				t.Errorf("waits between the tries of page 3: %v, want %v", got, want)
			}
			status, err := r1.Status(ctx)
			if err != nil || status.LastResult != resultFailed || !status.Resuming || !strings.Contains(status.LastError, "500") || status.Recovered != 200 {
				t.Errorf("status after the failed pass: %+v %v", status, err)
			}
			r1.Stop()

			failing = false
			s2 := second()
			r2 := newReconciler(t, Config{Store: s2, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL},
				Sink: &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: s2, TTL: time.Hour}}, &waits{})
			before := len(srv.queries())
			sum, err = r2.Run(ctx)
			if err != nil || !sum.Resumed || sum.Recovered != 250 || sum.Calls != 1 {
				t.Errorf("resumed pass: %+v %v, want it resumed with one call and 250 recovered in all", sum, err)
			}
			if q := srv.queries()[before]; q.Get("starting_after") != ids[199] {
				t.Errorf("the resumed pass asked for %v, want the page after %s", q, ids[199])
			}
			got := a.counts()
			if len(got) != 250 {
				t.Errorf("the application took %d events, want 250", len(got))
			}
			for id, n := range got {
				if n != 1 {
					t.Errorf("the application took %s %d times", id, n)
				}
			}
			status, _ = r2.Status(ctx)
			if status.LastResult != resultOK || status.Resuming || status.LastError != "" || status.LastSuccess == nil {
				t.Errorf("status after the resumed pass: %+v", status)
			}
			// the next pass starts from the newest event again
			before = len(srv.queries())
			if sum, err := r2.Run(ctx); err != nil || sum.Resumed || sum.Recovered != 0 {
				t.Errorf("next pass: %+v %v", sum, err)
			}
			if q := srv.queries()[before]; q.Get("starting_after") != "" {
				t.Errorf("the pass after a completed one asked for %v, want the newest events", q)
			}
		})
	}
}

// TestStripeRateLimits: a 429 is tried again after the wait its
// Retry-After asks for, else after a doubling backoff; a wait longer than
// a pass waits ends the pass, and no pass runs before it is over.
func TestStripeRateLimits(t *testing.T) {
	a := newStripeApp(t)
	s := newFileStore(t)
	srv := newStripeServer(t, stripeKey)
	srv.add("l", 3, time.Hour)
	srv.onRequest = func(n int, _ url.Values) (int, http.Header) {
		switch n {
		case 1:
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"7"}}
		case 2, 3:
			return http.StatusTooManyRequests, nil
		case 4:
			return http.StatusServiceUnavailable, http.Header{"Retry-After": {"30"}}
		}
		return 0, nil
	}
	w := &waits{}
	sink := &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: s, TTL: time.Hour}
	r := newReconciler(t, Config{Store: s, Sink: sink, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL}}, w)
	ctx := context.Background()
	sum, err := r.Run(ctx)
	if err != nil || sum.Recovered != 3 || sum.Calls != 5 {
		t.Fatalf("pass: %+v %v", sum, err)
	}
	if got, want := w.all(), []time.Duration{7 * time.Second, 2 * time.Second, 4 * time.Second, 30 * time.Second}; !slices.Equal(got, want) {
		t.Errorf("waits: %v, want %v (Retry-After, doubling backoff, a 503's Retry-After)", got, want)
	}

	srv.onRequest = func(int, url.Values) (int, http.Header) {
		return http.StatusTooManyRequests, http.Header{"Retry-After": {"3600"}}
	}
	before := time.Now()
	_, err = r.Run(ctx)
	var limited *RateLimitedError
	if !errors.As(err, &limited) || limited.Until.Before(before.Add(time.Hour)) {
		t.Fatalf("pass under a long rate limit: %v, want a RateLimitedError an hour away", err)
	}
	status, _ := r.Status(ctx)
	if status.RateLimitedUntil == nil || status.RateLimitedUntil.Before(before.Add(time.Hour-time.Second)) || !status.NextPass.Equal(*status.RateLimitedUntil) {
		t.Errorf("status: %+v, want the next pass at the end of the rate limit", status)
	}
	// the schedule's pass waits for it, though its every has passed
	r.now = func() time.Time { return before.Add(30 * time.Minute) }
	if sum, err := r.run(ctx, false); err != nil || !sum.Skipped {
		t.Errorf("scheduled pass during the rate limit: %+v %v, want it skipped", sum, err)
	}
}

// TestStripeRequestsAgainstStripeMock: the pass's requests, a first page
// and a resumed one, with a types filter, are what Stripe's own API
// simulator accepts (it validates every parameter against Stripe's
// OpenAPI description and refuses unknown ones), authenticated with a
// restricted key; the event it answers reaches the application signed so
// that Stripe's library accepts it. A key it refuses fails the pass
// without the key in the error, the status, the log or the store.
func TestStripeRequestsAgainstStripeMock(t *testing.T) {
	mock := testkit.StartStripeMock(t)
	s := newFileStore(t)
	var got []string
	a := newApp(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		// stripe-mock's fixture has no api_version
		ev, err := webhook.ConstructEventWithOptions(body, r.Header.Get("Stripe-Signature"), endpointSecret,
			webhook.ConstructEventOptions{IgnoreAPIVersionMismatch: true})
		if err != nil {
			t.Errorf("Stripe's library refused the delivery: %v", err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got = append(got, ev.ID)
	})
	sink := &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: s, TTL: time.Hour}
	provider := &Stripe{APIKey: "rk_test_reconcile0001", APIURL: mock.URL, Types: []string{"payment_intent.succeeded", "charge.*"}}
	r := newReconciler(t, Config{Store: s, Sink: sink, Provider: provider}, &waits{})
	ctx := context.Background()
	sum, err := r.Run(ctx)
	if err != nil || sum.Recovered != 1 || sum.Calls != 1 {
		t.Fatalf("pass against stripe-mock: %+v %v", sum, err)
	}
	if len(got) != 1 || !strings.HasPrefix(got[0], "evt_") {
		t.Fatalf("the application got %v", got)
	}
	if sum, err := r.Run(ctx); err != nil || sum.Recovered != 0 || sum.Known != 1 {
		t.Errorf("second pass: %+v %v, want the event known", sum, err)
	}

	// a resumed pass: its starting_after is accepted too
	st, prev, err := r.readState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st.LastResult = resultFailed
	st.Pass = &passState{Since: time.Now().Add(-time.Hour), Cursor: []byte(`{"starting_after":"` + got[0] + `"}`)}
	if _, err := r.writeState(ctx, "test", prev, st); err != nil {
		t.Fatal(err)
	}
	if sum, err := r.Run(ctx); err != nil || !sum.Resumed {
		t.Errorf("resumed pass against stripe-mock: %+v %v", sum, err)
	}

	// stripe-mock takes only test-mode keys, and quotes the header it
	// refused in its message
	refused := "rk_live_51ReconcileRefusedKeyNeverShown"
	logs := captureLogs()
	bad := newReconciler(t, Config{Store: s, Sink: sink, Logger: logs.logger, Provider: &Stripe{APIKey: refused, APIURL: mock.URL}}, &waits{})
	_, err = bad.Run(ctx)
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnauthorized || apiErr.Reason != "invalid_request_error" {
		t.Fatalf("pass with a refused key: %v, want a 401 (invalid_request_error)", err)
	}
	assertSecretNowhere(t, refused, bad, s, logs, nil, err)
}

// TestStripeEventsKeyedByTheRouteRule: a recovered event is keyed by the
// route's own rule (here json:data.object.id, one key per payment
// intent), as Stripe's delivery of it would be.
func TestStripeEventsKeyedByTheRouteRule(t *testing.T) {
	a := newStripeApp(t)
	s := newFileStore(t)
	srv := newStripeServer(t, stripeKey)
	ids := srv.add("k", 3, time.Hour)
	keyOf := func(ev *event.Request) (string, error) {
		v := gjson.GetBytes(ev.Body, "data.object.id").Str
		if v == "" {
			return "", errors.New("no data.object.id")
		}
		return v, nil
	}
	r := newReconciler(t, Config{Store: s, KeyOf: keyOf, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL},
		Sink: &RedeliverSink{URL: a.URL, Namespace: "idem:stripe", Store: s, TTL: time.Hour}}, &waits{})
	ctx := context.Background()
	if sum, err := r.Run(ctx); err != nil || sum.Recovered != 3 {
		t.Fatalf("pass: %+v %v", sum, err)
	}
	for _, id := range ids {
		if info, err := s.Inspect(ctx, "idem:stripe:pi_"+id[4:]); err != nil || info.State != store.KeyCompleted {
			t.Errorf("the route's key of %s: %v %v, want completed", id, info.State, err)
		}
		if info, _ := s.Inspect(ctx, "idem:stripe:"+id); info.State != store.KeyAbsent {
			t.Errorf("the event id %s was used as the key", id)
		}
	}
	if sum, err := r.Run(ctx); err != nil || sum.Recovered != 0 || sum.Known != 3 {
		t.Errorf("second pass: %+v %v", sum, err)
	}
}

// TestStripeKeyNotInStoredEvents: the events a pass enters into the inbox
// are stored (here dead-lettered, the application refusing them) without
// the key anywhere in them.
func TestStripeKeyNotInStoredEvents(t *testing.T) {
	for _, rt := range stripeRoutes[:2] {
		t.Run(rt.name, func(t *testing.T) {
			a := newStripeApp(t)
			refusing := newApp(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				a.mu.Lock()
				fmt.Fprintf(&a.seen, "%v\n%s\n", r.Header, body)
				a.mu.Unlock()
				w.WriteHeader(http.StatusBadRequest) // a permanent failure: dead-lettered at once
			})
			a.app = refusing
			st, sink, ib := rt.open(t, a)
			srv := newStripeServer(t, stripeKey)
			srv.add("d", 5, time.Hour)
			logs := captureLogs()
			r := newReconciler(t, Config{Store: st, Sink: sink, Logger: logs.logger, Provider: &Stripe{APIKey: stripeKey, APIURL: srv.URL}}, &waits{})
			if sum, err := r.Run(context.Background()); err != nil || sum.Recovered != 5 {
				t.Fatalf("pass: %+v %v", sum, err)
			}
			testkit.WaitFor(t, 30*time.Second, "the events are dead-lettered", func() (bool, string) {
				c, err := ib.Counts(context.Background())
				return err == nil && c.Dead == 5, fmt.Sprintf("%+v %v", c, err)
			})
			if text := storeText(t, st); !strings.Contains(text, "evt_d0000") {
				t.Fatalf("the store holds no stored event: the search would prove nothing")
			}
			assertSecretNowhere(t, stripeKey, r, st, logs, a)
		})
	}
}
