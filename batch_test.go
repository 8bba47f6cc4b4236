package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// batchApp is an application that records the ids of the items each
// request gave it, and answers status.
type batchApp struct {
	mu     sync.Mutex
	got    [][]string // each request's item ids, in order
	status int
	bodies []string
}

func (a *batchApp) next(t *testing.T) caddyhttp.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("reading the body: %v", err)
		}
		if r.ContentLength != int64(len(body)) {
			t.Errorf("Content-Length %d for a body of %d bytes", r.ContentLength, len(body))
		}
		var env struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		if !json.Valid(body) {
			t.Errorf("the application got no JSON: %s", body)
		}
		_ = json.Unmarshal(body, &env) // a body that is no batch gives no ids
		var ids []string
		for _, it := range env.Items {
			ids = append(ids, it.ID)
		}
		a.mu.Lock()
		a.got = append(a.got, ids)
		a.bodies = append(a.bodies, string(body))
		status := a.status
		a.mu.Unlock()
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		return nil
	}
}

// calls returns what the application got so far.
func (a *batchApp) calls() [][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// itemsBody is an envelope holding items with these ids.
func itemsBody(ids ...string) string {
	var b strings.Builder
	b.WriteString(`{"type":"batch","items":[`)
	for i, id := range ids {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(`{"id":"` + id + `","n":` + `"` + strings.Repeat("x", i) + `"}`)
	}
	b.WriteString(`],"sent":"now"}`)
	return b.String()
}

func postBatch(h *Handler, body string, next caddyhttp.HandlerFunc) served {
	return serveReq(h, httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body)), next)
}

func TestBatchRecomposedRetryDeliversEachItemOnce(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "batch-recomposed", Batch: &BatchConfig{Path: "json:items", Key: []string{"json:id"}}})
	app := &batchApp{}
	next := app.next(t)

	first := postBatch(h, itemsBody("1", "2", "3"), next)
	if first.w.Code != 200 || first.result != results.New {
		t.Fatalf("first batch: %d %s", first.w.Code, first.result)
	}
	// retried with a different composition: 2 and 3 again, 4 and 5 new
	second := postBatch(h, itemsBody("2", "4", "3", "5"), next)
	if second.w.Code != 200 || second.result != results.New || second.w.Header().Get(record.ReplayedHeader) != "" {
		t.Fatalf("second batch: %d %s %v", second.w.Code, second.result, second.w.Header())
	}
	// nothing new: the success answer, marked replayed, and no call
	third := postBatch(h, itemsBody("5", "1"), next)
	if third.w.Code != 200 || third.result != results.Replayed || third.w.Header().Get(record.ReplayedHeader) != "true" {
		t.Fatalf("third batch: %d %s %v", third.w.Code, third.result, third.w.Header())
	}
	want := [][]string{{"1", "2", "3"}, {"4", "5"}}
	if got := app.calls(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("the application got %v, want %v", got, want)
	}
	// the envelope keeps what is around the items
	if b := app.bodies[1]; !strings.HasPrefix(b, `{"type":"batch","items":[{"id":"4"`) || !strings.HasSuffix(b, `],"sent":"now"}`) {
		t.Fatalf("second envelope: %s", b)
	}
}

func TestBatchFailureReleasesEveryItem(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "batch-release", Batch: &BatchConfig{Path: "json:items", Key: []string{"json:id"}}})
	app := &batchApp{status: http.StatusInternalServerError}
	next := app.next(t)
	if s := postBatch(h, itemsBody("a", "b"), next); s.w.Code != 500 {
		t.Fatalf("first: %d", s.w.Code)
	}
	// a 4xx is recorded for one delivery, but a batch completes on a 2xx only
	app.status = http.StatusBadRequest
	if s := postBatch(h, itemsBody("b", "a"), next); s.w.Code != 400 {
		t.Fatalf("second: %d", s.w.Code)
	}
	app.status = http.StatusOK
	if s := postBatch(h, itemsBody("a", "b", "c"), next); s.w.Code != 200 || s.result != results.New {
		t.Fatalf("third: %d %s", s.w.Code, s.result)
	}
	want := [][]string{{"a", "b"}, {"b", "a"}, {"a", "b", "c"}}
	if got := app.calls(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("the application got %v, want %v", got, want)
	}
}

func TestBatchItemInFlightIsAConflictForTheWholeRequest(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "batch-inflight", Batch: &BatchConfig{Path: "json:items", Key: []string{"json:id"}}})
	app := &batchApp{}
	entered, proceed := make(chan struct{}), make(chan struct{})
	slow := func(w http.ResponseWriter, r *http.Request) error {
		close(entered)
		<-proceed
		return app.next(t)(w, r)
	}
	done := make(chan served)
	go func() { done <- postBatch(h, itemsBody("p", "q"), slow) }()
	<-entered
	// q is in flight: the request is refused whole, r claimed by none
	s := postBatch(h, itemsBody("q", "r"), app.next(t))
	if s.w.Code != http.StatusConflict || s.result != results.Conflict || s.w.Header().Get("Retry-After") == "" {
		t.Fatalf("overlapping batch: %d %s %v", s.w.Code, s.result, s.w.Header())
	}
	close(proceed)
	if s := <-done; s.w.Code != 200 {
		t.Fatalf("first: %d", s.w.Code)
	}
	if s := postBatch(h, itemsBody("q", "r"), app.next(t)); s.w.Code != 200 || s.result != results.New {
		t.Fatalf("retry: %d %s", s.w.Code, s.result)
	}
	want := [][]string{{"p", "q"}, {"r"}}
	if got := app.calls(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("the application got %v, want %v", got, want)
	}
}

func TestBatchConcurrentOverlappingBatchesDeliverEachItemOnce(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "batch-concurrent", Batch: &BatchConfig{Path: "json:items", Key: []string{"json:id"}}})
	app := &batchApp{}
	next := app.next(t)
	ids := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	var wg sync.WaitGroup
	// every window of three ids, four times over, at once; a 409 is
	// retried as a provider would, for as long as a loaded machine may
	// keep the other batch in flight
	deadline := time.Now().Add(time.Minute)
	for round := range 4 {
		for i := range len(ids) - 2 {
			wg.Go(func() {
				body := itemsBody(ids[i : i+3]...)
				for {
					s := postBatch(h, body, next)
					if s.w.Code == 200 {
						return
					}
					if s.w.Code != http.StatusConflict || time.Now().After(deadline) {
						t.Errorf("round %d window %d: %d", round, i, s.w.Code)
						return
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	count := map[string]int{}
	for _, call := range app.calls() {
		for _, id := range call {
			count[id]++
		}
	}
	for _, id := range ids {
		if count[id] != 1 {
			t.Errorf("item %s delivered %d times (%v)", id, count[id], app.calls())
		}
	}
}

func TestBatchBoundsAndShapes(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "batch-bounds", Batch: &BatchConfig{Path: "json:items", Key: []string{"json:id"}, MaxItems: 3}})
	app := &batchApp{}
	next := app.next(t)
	if s := postBatch(h, itemsBody("1", "2", "3", "4"), next); s.w.Code != http.StatusRequestEntityTooLarge || s.result != results.TooLarge ||
		!strings.Contains(s.w.Body.String(), "more than max_items 3") {
		t.Fatalf("over max_items: %d %s %s", s.w.Code, s.result, s.w.Body)
	}
	// an item given twice in one request is one event
	if s := postBatch(h, itemsBody("x", "y", "x"), next); s.w.Code != 200 {
		t.Fatalf("repeated item: %d", s.w.Code)
	}
	// no array at the path: one delivery, keyed by the route's key
	if s := postBatch(h, `{"items":{"id":"z"}}`, next); s.w.Code != 200 || s.result != results.New || !strings.HasPrefix(s.key, "sha256:") {
		t.Fatalf("not a batch: %d %s %s", s.w.Code, s.result, s.key)
	}
	if s := postBatch(h, `{"items":{"id":"z"}}`, next); s.result != results.Replayed {
		t.Fatalf("not a batch, again: %s", s.result)
	}
	// an item whose key member is given twice is ambiguous: 400, no call
	if s := postBatch(h, `{"items":[{"id":"m","id":"n"}]}`, next); s.w.Code != http.StatusBadRequest || s.result != results.Ambiguous {
		t.Fatalf("ambiguous item: %d %s", s.w.Code, s.result)
	}
	got := app.calls()
	if len(got) != 2 || !slices.Equal(got[0], []string{"x", "y"}) || got[1] != nil {
		t.Fatalf("the application got %v", got)
	}
}

func TestBatchItemKeys(t *testing.T) {
	srcs, err := parseItemKeys([]string{"json:a+json:b", "json:id", "body"})
	if err != nil {
		t.Fatal(err)
	}
	rule := &batchRule{keys: srcs}
	for _, tc := range []struct{ item, want string }{
		{`{"a":"x","b":"y","id":"i"}`, "x+y"},
		{`{"a":"x+1","b":"y\\"}`, `x\+1+y\\`},
		{`{"a":"x+","b":"1"}`, `x\++1`},
		{`{"b":2}`, "+2"},
		{`{"id":7}`, "7"},
		{`{"other":1}`, ""},
	} {
		sum := [32]byte{1}
		got, err := rule.itemKey([]byte(tc.item), &sum)
		if err != nil {
			t.Fatal(err)
		}
		if tc.want == "" {
			tc.want = hashKey(&sum)
		}
		if got != tc.want {
			t.Errorf("%s: key %q, want %q", tc.item, got, tc.want)
		}
	}
	for _, bad := range []string{"header:X-Id", "query:id", "json:a+body", "json:", "json:a+"} {
		if _, err := parseItemKeys([]string{bad}); err == nil {
			t.Errorf("item key %q accepted", bad)
		}
	}
}

// TestPresetBatches: every preset's batch is one the batch option takes,
// and Adyen's and Pix's composite keys tell apart what the providers send
// again under the same id: Adyen's outcomes (success) of one pspReference
// and eventCode, a Pix's refund callback (its devolucoes) under the Pix's
// endToEndId; a retry of either has the same key.
func TestPresetBatches(t *testing.T) {
	rules := map[string]*batchRule{}
	for _, p := range providers.All() {
		if p.Batch == nil {
			continue
		}
		rule := &batchRule{}
		var err error
		if rule.path, err = parseBatchPath(p.Batch.Path); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		if rule.keys, err = parseItemKeys(p.Batch.Key); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		rules[p.Name] = rule
	}
	key := func(preset, item string) string {
		t.Helper()
		sum := sha256.Sum256([]byte(item))
		k, err := rules[preset].itemKey([]byte(item), &sum)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	adyen := func(success, date string) string {
		return `{"NotificationRequestItem":{"pspReference":"7914073381342284","eventCode":"AUTHORISATION","success":"` + success +
			`","eventDate":"` + date + `","amount":{"value":1000,"currency":"EUR"}}}`
	}
	if k := key("adyen", adyen("true", "2026-12-06T10:00:00+01:00")); k != "7914073381342284+AUTHORISATION+true" ||
		key("adyen", adyen("true", "2026-12-06T10:05:00+01:00")) != k || key("adyen", adyen("false", "2026-12-06T10:00:00+01:00")) == k {
		t.Errorf("adyen: a duplicate with another eventDate, or another outcome, keyed wrongly (%s)", k)
	}
	const pix = `{"endToEndId":"E87654321202009091221dfghi123456","txid":"971122d8f37211eaadc10242ac120002","valor":"110.00"`
	refund := pix + `,"devolucoes":[{"id":"123ABC","rtrId":"D12345678202009091221abcdf098765","valor":"10.00","status":"DEVOLVIDO"}]}`
	again := key("pix", refund)
	if k := key("pix", pix+"}"); k != "E87654321202009091221dfghi123456+" || key("pix", refund) == k || key("pix", refund) != again {
		t.Errorf("pix: the Pix %q and its refund %q", k, key("pix", refund))
	}
	if k := key("pix", `{"txid":"x"}`); !isBodyKey(k) {
		t.Errorf("pix: an item without endToEndId nor devolucoes keyed %q, want its bytes", k)
	}
}

func TestBatchResignsTheEnvelope(t *testing.T) {
	const secret = "whsec_batch"
	h := newTestHandler(t, &Handler{Provider: "stripe", Source: "batch-resign",
		Verify: &providers.VerifyConfig{Secrets: []string{secret}},
		Batch:  &BatchConfig{Path: "json:items", Key: []string{"json:id"}}})
	app := &batchApp{}
	var verified []error
	next := func(w http.ResponseWriter, r *http.Request) error {
		body, _ := io.ReadAll(r.Body)
		verified = append(verified, webhook.ValidatePayload(body, r.Header.Get("Stripe-Signature"), secret))
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		return app.next(t)(w, r)
	}
	send := func(body string) served {
		signed := webhook.GenerateTestSignedPayload(&webhook.UnsignedPayload{Payload: []byte(body), Secret: secret})
		r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
		r.Header.Set("Stripe-Signature", signed.Header)
		return serveReq(h, r, next)
	}
	if s := send(itemsBody("1", "2")); s.w.Code != 200 {
		t.Fatalf("first: %d %s", s.w.Code, s.w.Body)
	}
	if s := send(itemsBody("2", "3")); s.w.Code != 200 {
		t.Fatalf("second: %d %s", s.w.Code, s.w.Body)
	}
	if len(verified) != 2 || verified[0] != nil || verified[1] != nil {
		t.Fatalf("stripe-go on what the application got: %v", verified)
	}
	if got := app.calls(); len(got) != 2 || !slices.Equal(got[1], []string{"3"}) {
		t.Fatalf("the application got %v", got)
	}
}

func TestBatchConfigErrors(t *testing.T) {
	for _, c := range []struct {
		h    Handler
		want string
	}{
		{Handler{Source: "b1", Batch: &BatchConfig{Path: "items"}}, `invalid batch "items": want json:<path to the array of items> or off`},
		{Handler{Source: "b2", Batch: &BatchConfig{Path: "json:a..b"}}, "an empty segment"},
		{Handler{Source: "b3", Batch: &BatchConfig{Path: "json:items", Key: []string{"header:X-Id"}}}, `invalid batch key "header:X-Id"`},
		{Handler{Source: "b4", Batch: &BatchConfig{Path: "json:items", MaxItems: 1001}}, "invalid max_items"},
		{Handler{Source: "b5", InFlight: "proceed", Batch: &BatchConfig{Path: "json:items"}}, "in_flight proceed cannot be used with batch"},
		{Handler{Source: "b6", Forward: &ForwardConfig{Signature: "keep"}, Batch: &BatchConfig{Path: "json:items"}}, "forward signature keep cannot be used with batch"},
	} {
		ctx, cancel := testkit.NewContext(t)
		h := c.h
		err := h.Provision(ctx)
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", h.Source, err, c.want)
		}
		_ = h.Cleanup()
	}
}

func TestBatchArchivedOnceWithItsItems(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "batch-archive", Batch: &BatchConfig{Path: "json:items", Key: []string{"json:id"}}, Archive: &ArchiveConfig{}})
	app := &batchApp{}
	next := app.next(t)
	postBatch(h, itemsBody("1", "2"), next)
	postBatch(h, itemsBody("2", "3"), next)
	var evs []archive.Event
	testkit.Eventually(t, 30*time.Second, "both requests archived", func() bool {
		var err error
		evs, _, err = h.archive.Find(context.Background(), archive.Query{Count: 10})
		return err == nil && len(evs) == 2
	})
	want := [][]archive.Item{
		{{Key: "2", New: false}, {Key: "3", New: true}},
		{{Key: "1", New: true}, {Key: "2", New: true}},
	}
	for i, ev := range evs {
		if !slices.Equal(ev.Items, want[i]) || ev.Result != results.New {
			t.Errorf("event %d: %s %+v, want items %+v", i, ev.Result, ev.Items, want[i])
		}
	}
	// a key lookup finds every request that held the item
	found, _, err := h.archive.Find(context.Background(), archive.Query{Key: "2", Count: 10})
	if err != nil || len(found) != 2 {
		t.Fatalf("lookup of item 2: %d events, %v", len(found), err)
	}
	if found, _, _ := h.archive.Find(context.Background(), archive.Query{Key: "3", Count: 10}); len(found) != 1 || found[0].ID != evs[0].ID {
		t.Fatalf("lookup of item 3: %+v", found)
	}
}
