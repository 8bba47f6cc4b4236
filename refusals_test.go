package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// refusedEvents waits for n refusals of h to be listed, and returns them.
func refusedEvents(t *testing.T, h *Handler, n int) []archive.Event {
	t.Helper()
	var evs []archive.Event
	testkit.WaitFor(t, 10*time.Second, "refusals listed", func() (bool, string) {
		var err error
		evs, _, err = h.refusals.list.Find(context.Background(), archive.Query{Count: 1000})
		return err == nil && len(evs) >= n, ""
	})
	return evs
}

// TestRefusalsAreListed: a forged delivery, a stale one and a body over
// max_body are listed with their reason, the client, the provider's
// delivery id, the body's size and hash, and nothing of the signature or
// the secret.
func TestRefusalsAreListed(t *testing.T) {
	t.Run("memory", func(t *testing.T) { testRefusalsAreListed(t, `{"module":"memory"}`) })
	t.Run("file", func(t *testing.T) {
		testRefusalsAreListed(t, fmt.Sprintf(`{"module":"file","path":%q}`, filepath.Join(t.TempDir(), "store.db")))
	})
}

func testRefusalsAreListed(t *testing.T, storeJSON string) {
	h := newTestHandler(t, &Handler{Provider: "github", Verify: &providers.VerifyConfig{Secrets: []string{"gh-refusal-secret"}},
		MaxBody: 1024, StoreRaw: json.RawMessage(storeJSON)})
	var calls atomic.Int64
	body := `{"action":"opened"}`
	r := httptest.NewRequest(http.MethodPost, "/gh?x=1", strings.NewReader(body))
	r.Header.Set("X-GitHub-Delivery", "guid-forged")
	r.Header.Set("X-Hub-Signature-256", "sha256=0000000000000000000000000000000000000000000000000000000000000000")
	if got := serveReq(h, r, countingNext(&calls)); got.result != results.InvalidSignature {
		t.Fatalf("forged: %q", got.result)
	}
	big := httptest.NewRequest(http.MethodPost, "/gh", strings.NewReader(strings.Repeat("x", 2048)))
	big.Header.Set("X-GitHub-Delivery", "guid-big")
	if got := serveReq(h, big, countingNext(&calls)); got.result != results.TooLarge {
		t.Fatalf("too large: %q", got.result)
	}
	evs := refusedEvents(t, h, 2)
	byKey := map[string]archive.Event{}
	for _, ev := range evs {
		byKey[ev.Key] = ev
	}
	forged, ok := byKey["guid-forged"]
	sum := sha256.Sum256([]byte(body))
	if !ok || forged.Result != results.InvalidSignature || forged.Status != 401 || forged.Reason != "invalid signature" ||
		forged.Size == nil || *forged.Size != int64(len(body)) || forged.BodySHA256 != hex.EncodeToString(sum[:]) ||
		forged.URI != "/gh?x=1" || forged.Remote == "" {
		t.Fatalf("the forged delivery is listed as %+v", forged)
	}
	tooBig, ok := byKey["guid-big"]
	// its body was not read: its announced size, and no hash
	if !ok || tooBig.Status != 413 || !strings.HasPrefix(tooBig.Reason, "too large: 2.0 kB > 1.0 KiB") ||
		tooBig.Size == nil || *tooBig.Size != 2048 || tooBig.BodySHA256 != "" {
		t.Fatalf("the large body is listed as %+v (%v)", tooBig, evs)
	}
	whole, _, err := h.refusals.list.Event(context.Background(), mustParseID(t, forged.ID))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(whole)
	for _, secret := range []string{"gh-refusal-secret", "sha256=0000", `"action"`} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the listed refusal holds %q: %s", secret, raw)
		}
	}
	if calls.Load() != 0 {
		t.Fatal("a refused request reached the application")
	}
}

// TestRefusalsFloodIsBounded: a flood of forgeries is listed at a bounded
// rate; what comes faster is counted, not listed.
func TestRefusalsFloodIsBounded(t *testing.T) {
	h := newTestHandler(t, &Handler{Provider: "github", Verify: &providers.VerifyConfig{Secrets: []string{"s"}},
		StoreRaw: json.RawMessage(`{"module":"memory"}`), Source: "flood"})
	var calls atomic.Int64
	start := time.Now()
	for i := range 2000 {
		r := httptest.NewRequest(http.MethodPost, "/gh", strings.NewReader(`{"n":`+strings.Repeat("1", i%7+1)+`}`))
		r.Header.Set("X-Hub-Signature-256", "sha256=00")
		serveReq(h, r, countingNext(&calls))
	}
	elapsed := time.Since(start)
	evs := refusedEvents(t, h, 1)
	max := refusalsBurst + int(elapsed.Seconds()*refusalsPerSecond) + refusalsPerSecond
	if len(evs) > max {
		t.Fatalf("%d of 2000 forgeries listed in %s; at most %d may be", len(evs), elapsed, max)
	}
}

// mustParseID parses an event id.
func mustParseID(t *testing.T, s string) event.ID {
	t.Helper()
	id, ok := event.ParseID(s)
	if !ok {
		t.Fatalf("event id %q", s)
	}
	return id
}
