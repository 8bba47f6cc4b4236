package providers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// sdkVectors are deliveries signed once with Node's crypto and judged by a
// provider's own Node SDK (testdata/README.md).
type sdkVectors struct {
	ProducedBy string `json:"produced_by"`
	Secret     string `json:"secret"`
	PublicKey  string `json:"public_key"`
	// Clock is the time the SDK judged them at (Unix seconds).
	Clock   int64 `json:"clock"`
	Vectors []struct {
		Name     string            `json:"name"`
		Body     string            `json:"body"`
		Headers  map[string]string `json:"headers"`
		Valid    bool              `json:"valid"`
		SDKError string            `json:"sdk_error"`
	} `json:"vectors"`
}

func loadSDKVectors(t *testing.T, file string) sdkVectors {
	t.Helper()
	data, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	var v sdkVectors
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Vectors) == 0 || v.Clock == 0 {
		t.Fatalf("%s: no vectors", file)
	}
	return v
}

// sinceClock is the tolerance that holds the vectors' timestamps against
// the clock they were judged at, as a tolerance around it would: their age
// now plus the tolerance.
func sinceClock(clock int64, tolerance time.Duration) time.Duration {
	return time.Since(time.Unix(clock, 0)) + tolerance
}

// TestWebflowSDKVectors: the preset accepts exactly what webflow-api
// 3.3.4's WebhooksClient.verifySignature accepts (it checks no timestamp:
// the tolerance is stretched to the vectors' age).
func TestWebflowSDKVectors(t *testing.T) {
	vecs := loadSDKVectors(t, "webflow-api-3.3.4.json")
	v := mustBuild(t, VerifyConfig{Scheme: "webflow", Secrets: []string{vecs.Secret}, Tolerance: caddy.Duration(sinceClock(vecs.Clock, time.Hour))})
	valid := 0
	for _, vec := range vecs.Vectors {
		r := httptest.NewRequest(http.MethodPost, "/webflow", nil)
		for k, val := range vec.Headers {
			r.Header.Set(k, val)
		}
		want := signature.ErrInvalid
		if vec.Valid {
			want, valid = nil, valid+1
		}
		t.Run(vec.Name, func(t *testing.T) { sigtest.WantReason(t, v.Verify(r, []byte(vec.Body)), want) })
	}
	if valid == 0 {
		t.Fatal("no valid vector")
	}
}

// TestWebflow: the timestamp is in milliseconds, the tolerance of an hour
// covers Webflow's three retries ten minutes apart, and the signer writes
// what the formula of Webflow's SDK gives.
func TestWebflow(t *testing.T) {
	const secret = "webflow-oauth-client-secret"
	body := []byte(`{"triggerType":"form_submission","payload":{"name":"Contact","submittedAt":"2027-01-01T00:00:00.000Z","id":"6321ca84df3949bfc6752327"}}`)
	v := mustBuild(t, VerifyConfig{Scheme: "webflow", Secrets: []string{secret}})
	req := func(at time.Time, sig string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/webflow", nil)
		ms := strconv.FormatInt(at.UnixMilli(), 10)
		r.Header.Set("X-Webflow-Timestamp", ms)
		if sig == "" {
			sig = sigtest.HMACHex(secret, ms, ":", string(body))
		}
		r.Header.Set("X-Webflow-Signature", sig)
		return r
	}
	now := time.Now()
	sigtest.WantReason(t, v.Verify(req(now, ""), body), nil)
	sigtest.WantReason(t, v.Verify(req(now.Add(-35*time.Minute), ""), body), nil)
	sigtest.WantReason(t, v.Verify(req(now.Add(-61*time.Minute), ""), body), signature.ErrTimestamp)
	sigtest.WantReason(t, v.Verify(req(now.Add(61*time.Minute), ""), body), signature.ErrTimestamp)
	// seconds are not milliseconds: 1970
	r := req(now, "")
	r.Header.Set("X-Webflow-Timestamp", strconv.FormatInt(now.Unix(), 10))
	r.Header.Set("X-Webflow-Signature", sigtest.HMACHex(secret, strconv.FormatInt(now.Unix(), 10), ":", string(body)))
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrTimestamp)
	sigtest.WantReason(t, v.Verify(req(now, sigtest.HMACHex("another", "x")), body), signature.ErrInvalid)

	s, err := NewSigner("webflow", SignConfig{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	r = httptest.NewRequest(http.MethodPost, "/webflow", nil)
	if _, err := s.Sign(r, body, now); err != nil {
		t.Fatal(err)
	}
	ms := strconv.FormatInt(now.UnixMilli(), 10)
	if r.Header.Get("X-Webflow-Timestamp") != ms || r.Header.Get("X-Webflow-Signature") != sigtest.HMACHex(secret, ms, ":", string(body)) {
		t.Fatalf("signer wrote %v", r.Header)
	}
	wantPreset(t, "webflow", []string{"body"}, 0, nil)
}
