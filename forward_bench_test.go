package webhookidempotency

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/forward"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// forwardModes are the forward blocks the forward benchmarks compare:
// the provider's signature kept (the baseline), re-signed as the provider
// signs, and replaced by a Standard Webhooks signature of the route's.
var forwardModes = []ForwardConfig{
	{Signature: "keep"},
	{Signature: "resign"},
	{Signature: "edge", EdgeSecrets: []string{sigtest.StdSecretA}},
}

// BenchmarkForward is what `forward { signature … }` costs each request a
// route hands to the application later (an inbox attempt, a redelivery:
// docs/inbox.md, "What the application receives"), for the stripe and
// github presets and a 2 KB body: "prepare" builds the attempt's request
// from the stored event and prepares it as the route forwards (what the
// inbox does before it sends an attempt); "attempt" also posts it to an
// application on the loopback interface that answers 200 at once, and
// reads the answer (the application's CPU is in cpu-ns/op). `resign` is
// one HMAC of what the provider signs, at the attempt's time; `edge` one
// HMAC-SHA256 of id.timestamp.body per edge secret, and the provider's
// headers removed.
//
//	go test -run '^$' -bench 'Forward' -benchmem -count 3 .
func BenchmarkForward(b *testing.B) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	defer app.Close()
	client := app.Client()
	for _, step := range []string{"prepare", "attempt"} {
		for _, scheme := range []string{"stripe", "github"} {
			c := sigtestCase(b, scheme)
			for _, fc := range forwardModes {
				b.Run(step+"/"+scheme+"/"+fc.Signature, func(b *testing.B) {
					h := newBenchHandler(b, &Handler{
						Provider: scheme, Verify: &providers.VerifyConfig{Secrets: []string{c.Secrets[0]}},
						StoreRaw: json.RawMessage(benchMemoryStore), Forward: &fc,
					})
					if got := h.fwd.later.Mode().String(); got != fc.Signature {
						b.Fatalf("the route forwards later with %s, want %s", got, fc.Signature)
					}
					c.Body = string(sigtest.BenchBody(scheme))
					d := c.Delivery(b, c.Secrets[0], time.Now())
					rs := &requestState{h: h, r: d.Req, body: &pooledBody{buf: d.Body}, keyValue: "evt_forward_1"}
					ev := rs.buildInboxEvent()
					ctx := context.Background()
					f := h.fwd.later
					fd := forward.Delivery{Key: ev.Key, Secret: ev.Secret, PublicURL: ev.PublicURL()}
					b.SetBytes(int64(len(ev.Body)))
					b.ReportAllocs()
					b.ResetTimer()
					cpu := testkit.CPUTime()
					for i := 0; i < b.N; i++ {
						req, err := ev.NewRequest(ctx, app.URL+"/hook")
						if err != nil {
							b.Fatal(err)
						}
						req.Header.Set("Webhook-Attempt", strconv.Itoa(i+1))
						if err := f.Apply(req, ev.Body, fd, time.Now()); err != nil {
							b.Fatal(err)
						}
						if step == "attempt" {
							resp, err := client.Do(req)
							if err != nil {
								b.Fatal(err)
							}
							_, _ = io.Copy(io.Discard, resp.Body)
							_ = resp.Body.Close()
							if resp.StatusCode != http.StatusOK {
								b.Fatalf("the application answered %d", resp.StatusCode)
							}
						}
					}
					reportCPU(b, cpu)
				})
			}
		}
	}
}

// BenchmarkServeHTTPForward is BenchmarkServeHTTPMemorySigned at 1 KiB
// (a `github` delivery on the memory store, its body signed per key)
// with each forward mode toward the next handler: `keep` passes the
// request on as it came; `resign` and `edge` hand the next handler a copy
// of the headers (the archive keeps them as received) with the signature
// recomputed or replaced. A replay reaches no next handler.
//
//	go test -run '^$' -bench 'ServeHTTPForward/.*/new' -benchmem -count 3 .
func BenchmarkServeHTTPForward(b *testing.B) {
	for _, fc := range forwardModes {
		b.Run(fc.Signature, func(b *testing.B) {
			benchServeHTTP(b, benchSizes[:1], true, func(b *testing.B) *Handler {
				return newBenchHandler(b, &Handler{
					StoreRaw: json.RawMessage(benchMemoryStore), Forward: &fc,
					Verify: &providers.VerifyConfig{Scheme: "github", Secrets: []string{benchSecret}},
				})
			})
		})
	}
}

// sigtestCase is the signature test case of a scheme.
func sigtestCase(b *testing.B, scheme string) sigtest.Case {
	for _, c := range sigtest.Cases() {
		if c.Scheme == scheme && c.Name == "" {
			return c
		}
	}
	b.Fatalf("no signature test case for %s", scheme)
	return sigtest.Case{}
}
