package signature_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Hook0's published vectors: the conformance vectors every Hook0 client
// verifies (hook0/hook0 at 86a9d665080c89ba6f9c7b9de0cb50d72a406125,
// clients/conformance/signature.json, whose codes Hook0 computed outside
// its clients; also in clients/go/signature_test.go), and the output
// worker's own (output-worker/src/work.rs, create_signature_v0 and _v1).
const (
	hook0Secret  = "a-subscription-secret"
	hook0Payload = `{"event":"user.created"}`
	hook0At      = 1800000000
	// the moment and the body
	hook0BodyCode = "d17d66b66fca89390c5b967c45e8928fc732db07a0aabe8167b1e98213081ffe"
	// the moment, `x-event-id x-delivery-id`, their values, the body
	hook0HeadersCode = "19a6fb8f6581715b241a93af02a58611c3b0ac7b747a8d2a5b120ee418d0c347"
	// the same two headers named and valued the other way round
	hook0ReversedCode = "bf5f4e5fe0c9143510ae192f983316a09ed392d0104d2ce0faa3d7bce3687acb"
)

func hook0Request(signature string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(hook0Payload))
	r.Header.Set("X-Event-Id", "evt-1")
	r.Header.Set("X-Delivery-Id", "dlv-1")
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-Hook0-Signature", signature)
	return r
}

func newHook0(t *testing.T, cfg signature.Hook0Config) signature.Verifier {
	t.Helper()
	v, err := signature.NewHook0(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestHook0ConformanceVectors: the scheme accepts and refuses what every
// Hook0 client does, for the reason Hook0 names (a code mismatch, a
// header not delivered or a code that is not hex: ErrInvalid; a moment
// outside the tolerance: ErrTimestamp).
func TestHook0ConformanceVectors(t *testing.T) {
	signature.SetClock(t, time.Unix(hook0At, 0))
	v := newHook0(t, signature.Hook0Config{Secrets: []string{hook0Secret}, Tolerance: 300 * time.Second})
	ts := strconv.Itoa(hook0At)
	for _, tc := range []struct {
		name, sig string
		want      *signature.Error
	}{
		{"body scheme", "t=" + ts + ",v0=" + hook0BodyCode, nil},
		{"header scheme", "t=" + ts + ",h=x-event-id x-delivery-id,v1=" + hook0HeadersCode, nil},
		{"v1 is verified when both are offered", "t=" + ts + ",h=x-event-id x-delivery-id,v0=" + hook0ReversedCode + ",v1=" + hook0HeadersCode, nil},
		{"a right v0 does not rescue a wrong v1", "t=" + ts + ",h=x-event-id x-delivery-id,v0=" + hook0BodyCode + ",v1=" + hook0ReversedCode, signature.ErrInvalid},
		{"the order of h is signed", "t=" + ts + ",h=x-delivery-id x-event-id,v1=" + hook0HeadersCode, signature.ErrInvalid},
		{"headers read in the order of h", "t=" + ts + ",h=x-delivery-id x-event-id,v1=" + hook0ReversedCode, nil},
		{"a covered header not delivered", "t=" + ts + ",h=x-event-id x-missing,v1=" + hook0HeadersCode, signature.ErrInvalid},
		{"a code that is not hex", "t=" + ts + ",v0=" + hook0BodyCode[:63] + "z", signature.ErrInvalid},
		{"a code that is not whole", "t=" + ts + ",v0=" + hook0BodyCode[:63], signature.ErrInvalid},
		{"older than the tolerance", "t=1799999699,v0=4168cc6c683357e103055b48584715f12e2baa4e679b8e076254247f11edf34d", signature.ErrTimestamp},
		{"further ahead than the tolerance", "t=1800000301,v0=ba4b79e449ae52edb505b6baa07380be2baa6e0c4c6fec3b9a01c85d47a4935f", signature.ErrTimestamp},
		{"at the edge of the window", "t=1799999700,v0=f9689580483e051113d28de23c1658c509da2b00e7bc15a5aaa83b8bdf83ff81", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigtest.WantReason(t, v.Verify(hook0Request(tc.sig), []byte(hook0Payload)), tc.want)
		})
	}
}

// TestHook0OutputWorkerVectors: what Hook0's output worker signs
// (work.rs's unit tests: secret `secret`, body `hello !`, 2021-11-15
// 00:30:00 UTC, X-Event-Id and X-EVENT-TYPE) verifies, v0 and v1.
func TestHook0OutputWorkerVectors(t *testing.T) {
	signature.SetClock(t, time.Unix(1636936200, 0))
	v := newHook0(t, signature.Hook0Config{Secrets: []string{"other", "secret"}})
	body := []byte("hello !")
	r := httptest.NewRequest(http.MethodPost, "/", nil)
	r.Header.Set("X-Event-Id", "1a01cb48-5142-4d9b-8f90-d20cca61f0ee")
	r.Header.Set("X-Event-Type", "service.resource.verb")
	for _, sig := range []string{
		"t=1636936200,v0=1b3d69df55f1e52f05224ba94a5162abeb17ef52cd7f4948c390f810d6a87e98",
		"t=1636936200,h=x-event-id x-event-type,v1=bc521546ba5de381b12f135782d2008b028c3065c191760b12b76850a8fc8f51",
		"t=1636936200,v0=1b3d69df55f1e52f05224ba94a5162abeb17ef52cd7f4948c390f810d6a87e98,h=x-event-id x-event-type,v1=bc521546ba5de381b12f135782d2008b028c3065c191760b12b76850a8fc8f51",
	} {
		r.Header.Set("X-Hook0-Signature", sig)
		sigtest.WantReason(t, v.Verify(r, body), nil)
		sigtest.WantReason(t, v.Verify(r, []byte("hello ?")), signature.ErrInvalid)
	}
	// another value of a covered header
	r.Header.Set("X-Event-Type", "service.resource.other")
	sigtest.WantReason(t, v.Verify(r, body), signature.ErrInvalid)
}

// TestHook0Require: with Require, only a v1 that covers the required
// headers passes: a v0 alone, or an `h` without them, is refused, and so
// is a required header given twice in `h` but covered once.
func TestHook0Require(t *testing.T) {
	signature.SetClock(t, time.Unix(hook0At, 0))
	v := newHook0(t, signature.Hook0Config{Secrets: []string{hook0Secret}, Require: []string{"X-Event-Id"}})
	ts := strconv.Itoa(hook0At)
	sigtest.WantReason(t, v.Verify(hook0Request("t="+ts+",h=x-event-id x-delivery-id,v1="+hook0HeadersCode), []byte(hook0Payload)), nil)
	sigtest.WantReason(t, v.Verify(hook0Request("t="+ts+",v0="+hook0BodyCode), []byte(hook0Payload)), signature.ErrInvalid)

	s, err := signature.NewHook0Signer("", hook0Secret, []string{"X-Delivery-Id"})
	if err != nil {
		t.Fatal(err)
	}
	r := hook0Request("")
	if _, err := s.Sign(r, []byte(hook0Payload), time.Unix(hook0At, 0)); err != nil {
		t.Fatal(err)
	}
	sigtest.WantReason(t, v.Verify(r, []byte(hook0Payload)), signature.ErrInvalid)
}

// TestHook0Signer: what the signer signs is what Hook0 signs (the
// conformance code for the same headers), it makes up an X-Event-Id when
// it covers one and there is none, and the verifier accepts it.
func TestHook0Signer(t *testing.T) {
	s, err := signature.NewHook0Signer("", hook0Secret, []string{"X-Event-Id", "x-delivery-id", "X-Absent"})
	if err != nil {
		t.Fatal(err)
	}
	r := hook0Request("")
	if _, err := s.Sign(r, []byte(hook0Payload), time.Unix(hook0At, 0)); err != nil {
		t.Fatal(err)
	}
	if got, want := r.Header.Get("X-Hook0-Signature"), "t=1800000000,h=x-delivery-id x-event-id,v1="+hook0ReversedCode; got != want {
		t.Fatalf("signed %q, want %q", got, want)
	}
	r = httptest.NewRequest(http.MethodPost, "/", nil)
	at := time.Now()
	if _, err := s.Sign(r, []byte(hook0Payload), at); err != nil {
		t.Fatal(err)
	}
	if r.Header.Get("X-Event-Id") == "" || !strings.Contains(r.Header.Get("X-Hook0-Signature"), ",h=x-event-id,v1=") {
		t.Fatalf("signed %v", r.Header)
	}
	v := newHook0(t, signature.Hook0Config{Secrets: []string{hook0Secret}, Require: []string{"x-event-id"}})
	sigtest.WantReason(t, v.Verify(r, []byte(hook0Payload)), nil)
}

// TestHook0Malformed: what cannot be read whole is refused.
func TestHook0Malformed(t *testing.T) {
	signature.SetClock(t, time.Unix(hook0At, 0))
	v := newHook0(t, signature.Hook0Config{Secrets: []string{hook0Secret}})
	ts := strconv.Itoa(hook0At)
	for _, tc := range []struct {
		name, sig string
		want      *signature.Error
	}{
		{"no header", "", signature.ErrMissing},
		{"no t", "v0=" + hook0BodyCode, signature.ErrInvalid},
		{"no code", "t=" + ts + ",h=x-event-id", signature.ErrInvalid},
		{"t not a number", "t=-1,v0=" + hook0BodyCode, signature.ErrInvalid},
		{"a name that is not a header name", "t=" + ts + ",h=x-event-id x:y,v1=" + hook0HeadersCode, signature.ErrInvalid},
		{"two spaces in h", "t=" + ts + ",h=x-event-id  x-delivery-id,v1=" + hook0HeadersCode, signature.ErrInvalid},
		{"too many parts", "t=" + ts + strings.Repeat(",x=1", 40) + ",v0=" + hook0BodyCode, signature.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sigtest.WantReason(t, v.Verify(hook0Request(tc.sig), []byte(hook0Payload)), tc.want)
		})
	}
	// 64 covered headers are read, 65 are not, even signed right
	for _, n := range []int{64, 65} {
		var names []string
		r := hook0Request("")
		for i := range n {
			name := "X-H" + strconv.Itoa(i)
			names = append(names, name)
			r.Header.Set(name, strconv.Itoa(i))
		}
		s, err := signature.NewHook0Signer("", hook0Secret, names)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Sign(r, []byte(hook0Payload), time.Unix(hook0At, 0)); err != nil {
			t.Fatal(err)
		}
		want := signature.ErrInvalid
		if n == 64 {
			want = nil
		}
		sigtest.WantReason(t, v.Verify(r, []byte(hook0Payload)), want)
	}
	if _, err := signature.NewHook0(signature.Hook0Config{}); err == nil {
		t.Error("no secret accepted")
	}
	if _, err := signature.NewHook0(signature.Hook0Config{Secrets: []string{"s"}, Require: []string{"x y"}}); err == nil {
		t.Error("a required name that is no header name accepted")
	}
}

// TestHook0Allocations: a v1 delivery is verified without allocating,
// headers of any case in `h` included.
func TestHook0Allocations(t *testing.T) {
	if testkit.RaceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: make test measures allocations in a run without it")
	}
	signature.SetClock(t, time.Unix(hook0At, 0))
	v := newHook0(t, signature.Hook0Config{Secrets: []string{hook0Secret}, Require: []string{"x-event-id"}})
	r := hook0Request("t=" + strconv.Itoa(hook0At) + ",h=X-EVENT-ID x-delivery-id,v1=" + sigtest.HMACHex(hook0Secret, strconv.Itoa(hook0At), ".X-EVENT-ID x-delivery-id.evt-1.dlv-1.", hook0Payload))
	body := []byte(hook0Payload)
	sigtest.WantReason(t, v.Verify(r, body), nil)
	if n := testing.AllocsPerRun(100, func() { _ = v.Verify(r, body) }); n != 0 {
		t.Errorf("%v allocations per verify, want none", n)
	}
}
