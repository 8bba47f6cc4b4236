package webhookidempotency

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// newTestHandler provisions h as Caddy would. A handler without a store
// gets the default one, a file in a data directory of the test's own: the
// process's (testkit.Main) would carry the keys a test recorded into its
// next run under -count. The test must not run in parallel.
func newTestHandler(t *testing.T, h *Handler) *Handler {
	t.Helper()
	testkit.OwnDataDir(t)
	ctx, cancel := testkit.NewContext(t)
	t.Cleanup(cancel)
	if err := h.Provision(ctx); err != nil {
		t.Fatalf("provision: %v", err)
	}
	t.Cleanup(func() { _ = h.Cleanup() })
	if err := h.Validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return h
}

// served is one request through ServeHTTP.
type served struct {
	w      *httptest.ResponseRecorder
	err    error
	result string
	key    string
}

// serveReq drives ServeHTTP directly with r.
func serveReq(h *Handler, r *http.Request, next caddyhttp.HandlerFunc) served {
	w := httptest.NewRecorder()
	repl := caddy.NewReplacer()
	r = caddyhttp.PrepareRequest(r, repl, w, nil)
	err := h.ServeHTTP(w, r, next)
	res, _ := repl.GetString(placeholderResult)
	key, _ := repl.GetString(placeholderKey)
	return served{w: w, err: err, result: res, key: key}
}

// serve posts body with an Idempotency-Key.
func serve(h *Handler, key, body string, next caddyhttp.HandlerFunc) served {
	r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	return serveReq(h, r, next)
}

// countingNext answers 200 with a body naming the call.
func countingNext(calls *atomic.Int64) caddyhttp.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) error {
		n := calls.Add(1)
		w.Header().Set("X-Call", string(rune('0'+n)))
		_, err := io.WriteString(w, "call "+string(rune('0'+n)))
		return err
	}
}

func TestHandlerNextErrorReleasesTheKey(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-next-error"})
	var calls atomic.Int64
	failing := func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		return caddyhttp.Error(http.StatusBadGateway, errors.New("upstream down"))
	}
	got := serve(h, "k1", "{}", failing)
	var he caddyhttp.HandlerError
	if !errors.As(got.err, &he) || he.StatusCode != http.StatusBadGateway {
		t.Fatalf("error = %v, want the next handler's 502 passed up", got.err)
	}
	got = serve(h, "k1", "{}", countingNext(&calls))
	if got.err != nil || got.w.Code != http.StatusOK || got.result != results.New {
		t.Fatalf("retry: %d %v %q, want a new 200", got.w.Code, got.err, got.result)
	}
	if calls.Load() != 2 {
		t.Fatalf("next called %d times, want 2 (the retry must be processed)", calls.Load())
	}
	got = serve(h, "k1", "{}", countingNext(&calls))
	if got.result != results.Replayed || got.w.Body.String() != "call 2" || calls.Load() != 2 {
		t.Fatalf("third: %q %q, calls %d; want a replay of the retry", got.result, got.w.Body.String(), calls.Load())
	}
}

func TestHandlerErrorAfterHeadersReleasesTheKey(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-late-error"})
	var calls atomic.Int64
	partial := func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "half")
		return caddyhttp.Error(http.StatusBadGateway, errors.New("upstream reset mid-body"))
	}
	serve(h, "k1", "{}", partial)
	got := serve(h, "k1", "{}", countingNext(&calls))
	if got.result != results.New || calls.Load() != 2 {
		t.Fatalf("retry: %q, calls %d; a response cut short must not be recorded", got.result, calls.Load())
	}
}

func TestHandlerClientGoneReleasesTheKey(t *testing.T) {
	for _, writes := range []bool{false, true} {
		name := "nothing written"
		if writes {
			name = "written after the client left"
		}
		t.Run(name, func(t *testing.T) {
			h := newTestHandler(t, &Handler{Source: "h-client-gone-" + strings.ReplaceAll(name, " ", "-")})
			var calls atomic.Int64
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("{}")).WithContext(ctx)
			r.Header.Set("Idempotency-Key", "k1")
			got := serveReq(h, r, func(w http.ResponseWriter, r *http.Request) error {
				calls.Add(1)
				cancel() // the client goes away while the upstream works
				if writes {
					_, _ = io.WriteString(w, "late")
				}
				return nil
			})
			if got.result != results.New {
				t.Fatalf("first: result %q", got.result)
			}
			got = serve(h, "k1", "{}", countingNext(&calls))
			if got.result != results.New || calls.Load() != 2 {
				t.Fatalf("retry: %q, calls %d; want it processed", got.result, calls.Load())
			}
		})
	}
}

func TestHandlerPanicReleasesTheKey(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-panic", Lease: caddy.Duration(30 * time.Millisecond)})
	var calls atomic.Int64
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the panic of the next handler was swallowed")
			}
		}()
		serve(h, "k1", "{}", func(w http.ResponseWriter, r *http.Request) error {
			calls.Add(1)
			panic("boom")
		})
	}()
	// net/http recovers a handler's panic and drops the connection: the key
	// must be released then, not kept in flight (and renewed) forever
	got := serve(h, "k1", "{}", countingNext(&calls))
	if got.result != results.New || calls.Load() != 2 {
		t.Fatalf("retry after a panic: %q %d, calls %d; want it processed", got.result, got.w.Code, calls.Load())
	}
}

func TestHandlerNothingWrittenIsRecordedAs200(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-status-0"})
	var calls atomic.Int64
	silent := func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		w.Header().Set("X-Silent", "yes")
		return nil
	}
	got := serve(h, "k1", "{}", silent)
	if got.err != nil || got.w.Code != http.StatusOK {
		t.Fatalf("first: %d %v", got.w.Code, got.err)
	}
	got = serve(h, "k1", "{}", silent)
	if got.result != results.Replayed || got.w.Code != http.StatusOK || got.w.Body.Len() != 0 {
		t.Fatalf("replay: %q %d %q, want an empty 200", got.result, got.w.Code, got.w.Body.String())
	}
	if got.w.Header().Get("X-Silent") != "yes" || got.w.Header().Get(record.ReplayedHeader) != "true" {
		t.Fatalf("replay headers: %v", got.w.Header())
	}
	if calls.Load() != 1 {
		t.Fatalf("next called %d times, want 1", calls.Load())
	}
}

func TestHandlerInformationalIsNotTheRecordedStatus(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-1xx"})
	var calls atomic.Int64
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.WriteHeader(http.StatusProcessing)
		w.Header().Set("X-Final", "1")
		w.WriteHeader(http.StatusCreated)
		_, err := io.WriteString(w, "created")
		return err
	})
	// a real server: httptest.ResponseRecorder takes a 1xx as the final status
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, nil)
		if err := h.ServeHTTP(w, r, next); err != nil {
			t.Errorf("ServeHTTP: %v", err)
		}
	}))
	defer srv.Close()
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set("Idempotency-Key", "k1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated || string(b) != "created" || resp.Header.Get("X-Final") != "1" {
			t.Fatalf("response %d: %d %q %v, want 201 created", i+1, resp.StatusCode, b, resp.Header)
		}
		if replayed := resp.Header.Get(record.ReplayedHeader) == "true"; replayed != (i == 1) {
			t.Fatalf("response %d: Idempotent-Replayed %q", i+1, resp.Header.Get(record.ReplayedHeader))
		}
		if resp.Header.Get("Link") != "" {
			t.Fatalf("response %d carries the 103's Link header", i+1)
		}
	}
	if calls.Load() != 1 {
		t.Fatalf("next called %d times", calls.Load())
	}
}

// opaqueReader hides a reader's length, as a chunked request body does.
type opaqueReader struct{ io.Reader }

func TestHandlerBodyHandedOnIntact(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-body"})
	body := make([]byte, 3*4096+17)
	for i := range body {
		body[i] = byte(i * 7)
	}
	for _, chunked := range []bool{false, true} {
		if chunked {
			body = append(body, 'c')
		}
		var src io.Reader = bytes.NewReader(body)
		if chunked {
			src = opaqueReader{src}
		}
		r := httptest.NewRequest(http.MethodPost, "/hook", src)
		if chunked {
			r.ContentLength = -1
			r.TransferEncoding = []string{"chunked"}
		}
		var calls atomic.Int64
		got := serveReq(h, r, func(w http.ResponseWriter, r *http.Request) error {
			calls.Add(1)
			if r.ContentLength != int64(len(body)) {
				t.Errorf("chunked=%v: ContentLength = %d, want %d", chunked, r.ContentLength, len(body))
			}
			if len(r.TransferEncoding) != 0 {
				t.Errorf("chunked=%v: TransferEncoding = %v, want none", chunked, r.TransferEncoding)
			}
			b, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(b, body) {
				t.Errorf("chunked=%v: Body differs (%d bytes, %v)", chunked, len(b), err)
			}
			_ = r.Body.Close()
			if r.GetBody == nil {
				t.Fatalf("chunked=%v: GetBody not set", chunked)
			}
			for i := range 2 {
				rc, err := r.GetBody()
				if err != nil {
					t.Fatalf("GetBody: %v", err)
				}
				b, err := io.ReadAll(rc)
				_ = rc.Close()
				if err != nil || !bytes.Equal(b, body) {
					t.Errorf("chunked=%v: GetBody #%d differs (%d bytes, %v)", chunked, i+1, len(b), err)
				}
			}
			return nil
		})
		if got.err != nil || calls.Load() != 1 {
			t.Fatalf("chunked=%v: %v, calls %d", chunked, got.err, calls.Load())
		}
		if got.result != results.New {
			t.Fatalf("chunked=%v: result %q", chunked, got.result)
		}
	}
}

func TestHandlerBodyOverMaxBody(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-max-body", MaxBody: 100})
	var calls atomic.Int64
	for _, chunked := range []bool{false, true} {
		var src io.Reader = bytes.NewReader(make([]byte, 101))
		if chunked {
			src = opaqueReader{src}
		}
		r := httptest.NewRequest(http.MethodPost, "/hook", src)
		r.Header.Set("Idempotency-Key", "k1")
		if chunked {
			r.ContentLength = -1
		}
		got := serveReq(h, r, countingNext(&calls))
		if got.w.Code != http.StatusRequestEntityTooLarge || got.result != results.TooLarge {
			t.Fatalf("chunked=%v: %d %q, want 413 too_large", chunked, got.w.Code, got.result)
		}
	}
	if calls.Load() != 0 {
		t.Fatalf("next called %d times", calls.Load())
	}
	// exactly max_body is accepted, and the key was never claimed
	got := serve(h, "k1", strings.Repeat("x", 100), countingNext(&calls))
	if got.result != results.New || calls.Load() != 1 {
		t.Fatalf("a body of max_body: %q, calls %d", got.result, calls.Load())
	}
}

func TestHandlerHopByHopAndDateNotReplayed(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-hop"})
	next := func(w http.ResponseWriter, r *http.Request) error {
		hdr := w.Header()
		for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection",
			"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Date"} {
			hdr.Set(name, "x")
		}
		hdr.Add("X-Multi", "a")
		hdr.Add("X-Multi", "b")
		hdr.Set("Content-Type", "text/plain")
		_, err := io.WriteString(w, "ok")
		return err
	}
	serve(h, "k1", "{}", next)
	got := serve(h, "k1", "{}", next)
	if got.result != results.Replayed {
		t.Fatalf("result %q", got.result)
	}
	hdr := got.w.Header()
	for _, name := range []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Connection",
		"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Date"} {
		if v, ok := hdr[name]; ok {
			t.Errorf("replayed %s: %q", name, v)
		}
	}
	if m := hdr.Values("X-Multi"); len(m) != 2 || m[0] != "a" || m[1] != "b" {
		t.Errorf("X-Multi = %q, want [a b]", m)
	}
	if hdr.Get("Content-Type") != "text/plain" || hdr.Get("Content-Length") != "2" || got.w.Body.String() != "ok" {
		t.Errorf("replay: %v %q", hdr, got.w.Body.String())
	}
}

func TestHandlerInFlightConflict(t *testing.T) {
	const lease = 5 * time.Second
	h := newTestHandler(t, &Handler{Source: "h-conflict", Lease: caddy.Duration(lease)})
	var calls atomic.Int64
	var inner served
	start := time.Now()
	serve(h, "k1", "{}", func(w http.ResponseWriter, r *http.Request) error {
		calls.Add(1)
		inner = serve(h, "k1", "{}", countingNext(&calls))
		return nil
	})
	if inner.w.Code != http.StatusConflict || inner.result != results.Conflict {
		t.Fatalf("duplicate while in flight: %d %q, want 409 conflict", inner.w.Code, inner.result)
	}
	// the lease left, rounded up: 5 unless a loaded machine took a second
	// or more between the claim and its duplicate
	ra, err := strconv.Atoi(inner.w.Header().Get("Retry-After"))
	if least := (lease - time.Since(start)).Seconds(); err != nil || ra > 5 || float64(ra) < least {
		t.Fatalf("Retry-After = %q, want the lease left (at least %.1fs), rounded up", inner.w.Header().Get("Retry-After"), least)
	}
	if ct := inner.w.Header().Get("Content-Type"); ct != "application/json" || !strings.HasPrefix(inner.w.Body.String(), `{"error":`) {
		t.Fatalf("409 body: %q %q", ct, inner.w.Body.String())
	}
	if calls.Load() != 1 {
		t.Fatalf("next called %d times", calls.Load())
	}
}

func TestHandlerSkippedMethod(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "h-skip"})
	var calls atomic.Int64
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/hook?hub.challenge=1", nil)
		r.Header.Set("Idempotency-Key", "k1")
		got := serveReq(h, r, countingNext(&calls))
		if got.result != results.Skipped || got.w.Header().Get(record.ReplayedHeader) != "" {
			t.Fatalf("GET: %q %v", got.result, got.w.Header())
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("next called %d times, want 2", calls.Load())
	}
}

func TestHandlerRetryAfterSeconds(t *testing.T) {
	for _, tc := range []struct {
		left, lease time.Duration
		want        string
	}{
		{0, 30 * time.Second, "30"},
		{time.Millisecond, 30 * time.Second, "1"},
		{time.Second, 30 * time.Second, "1"},
		{time.Second + time.Nanosecond, 30 * time.Second, "2"},
		{0, 100 * time.Millisecond, "1"},
	} {
		if got := retryAfterSeconds(tc.left, tc.lease); got != tc.want {
			t.Errorf("retryAfterSeconds(%v, %v) = %q, want %q", tc.left, tc.lease, got, tc.want)
		}
	}
}

// orderStore wraps a Store and notes when Complete and Release run.
type orderStore struct {
	store.Store
	events *[]string
}

func (s orderStore) Complete(ctx context.Context, key, owner string, record []byte, ttl time.Duration) error {
	*s.events = append(*s.events, "complete")
	return s.Store.Complete(ctx, key, owner, record, ttl)
}

func (s orderStore) Release(ctx context.Context, key, owner string) error {
	*s.events = append(*s.events, "release")
	return s.Store.Release(ctx, key, owner)
}

// orderWriter notes when the client is sent the status.
type orderWriter struct {
	*httptest.ResponseRecorder
	events *[]string
}

func (w orderWriter) WriteHeader(status int) {
	*w.events = append(*w.events, "client")
	w.ResponseRecorder.WriteHeader(status)
}

// The answer reaches the client only after the key is completed (or
// released), so a provider that re-sends as soon as it has the answer gets
// the replay, never a 409 for a key still in flight. An answer larger than
// max_response is streamed, and then goes out before.
func TestHandlerAnswerSentAfterTheStoreKnows(t *testing.T) {
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   []string
	}{
		{"recorded", http.StatusOK, "ok", []string{"complete", "client"}},
		{"released", http.StatusServiceUnavailable, "retry", []string{"release", "client"}},
		{"over max_response", http.StatusOK, strings.Repeat("x", 100), []string{"client", "complete"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var events []string
			h := newTestHandler(t, &Handler{Source: "order-" + strings.ReplaceAll(tc.name, " ", "-"), MaxResponse: 50})
			h.store.backend = orderStore{Store: h.store.backend, events: &events}
			next := func(w http.ResponseWriter, r *http.Request) error {
				w.WriteHeader(tc.status)
				_, err := io.WriteString(w, tc.body)
				return err
			}
			w := orderWriter{ResponseRecorder: httptest.NewRecorder(), events: &events}
			r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader("payload"))
			r = caddyhttp.PrepareRequest(r, caddy.NewReplacer(), w, nil)
			if err := h.ServeHTTP(w, r, caddyhttp.HandlerFunc(next)); err != nil {
				t.Fatal(err)
			}
			if strings.Join(events, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("events %v, want %v", events, tc.want)
			}
			if w.Code != tc.status || w.Body.String() != tc.body {
				t.Fatalf("client got %d %q, want %d %q", w.Code, w.Body.String(), tc.status, tc.body)
			}
		})
	}
}

func TestHandlerValidateRefusesNegativeTolerance(t *testing.T) {
	h := &Handler{Source: "neg", InFlight: "conflict", Mismatch: mismatchReplay, Fail: failOpen,
		Verify: &providers.VerifyConfig{Scheme: "token", Tolerance: caddy.Duration(-time.Second)}}
	err := h.Validate()
	if err == nil || !strings.Contains(err.Error(), "tolerance must not be negative") {
		t.Fatalf("Validate with a negative tolerance: %v", err)
	}
}

func TestHandlerBodyTimeoutDefaultAndValidate(t *testing.T) {
	h := newTestHandler(t, &Handler{Source: "bodytimeout"})
	if h.BodyTimeout != caddy.Duration(10*time.Second) {
		t.Fatalf("default body_timeout %v, want 10s", time.Duration(h.BodyTimeout))
	}
	neg := &Handler{Source: "neg", BodyTimeout: caddy.Duration(-time.Second)}
	if err := neg.Validate(); err == nil || !strings.Contains(err.Error(), "body_timeout must not be negative") {
		t.Fatalf("Validate with a negative body_timeout: %v", err)
	}
}

// A duplicate whose body differs from the recorded one is logged at WARN,
// with its key, under either `mismatch`: replayed, or refused with 422
// (docs/operating.md: Logs).
func TestHandlerMismatchLogsAWarning(t *testing.T) {
	for _, tc := range []struct {
		mismatch string
		status   int
		result   string
	}{
		{mismatchReplay, http.StatusOK, results.Replayed},
		{mismatchReject, http.StatusUnprocessableEntity, results.Mismatch},
	} {
		t.Run(tc.mismatch, func(t *testing.T) {
			h := newTestHandler(t, &Handler{Source: "h-mismatch-" + tc.mismatch, Mismatch: tc.mismatch})
			core, logs := observer.New(zapcore.WarnLevel)
			h.logger = zap.New(core)
			var calls atomic.Int64
			if got := serve(h, "k1", `{"a":1}`, countingNext(&calls)); got.result != results.New {
				t.Fatalf("first: %q, want new", got.result)
			}
			got := serve(h, "k1", `{"a":2}`, countingNext(&calls))
			if got.w.Code != tc.status || got.result != tc.result || calls.Load() != 1 {
				t.Fatalf("different body: %d %q, calls %d; want %d %q, 1 call", got.w.Code, got.result, calls.Load(), tc.status, tc.result)
			}
			warns := logs.FilterMessageSnippet("different body").All()
			if len(warns) != 1 {
				t.Fatalf("WARNs about the body: %d (%v), want 1", len(warns), logs.All())
			}
			if key := warns[0].ContextMap()["key"]; key != "idem:h-mismatch-"+tc.mismatch+":k1" {
				t.Errorf("WARN key = %v", key)
			}
		})
	}
}
