package webhookidempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Regression tests for what a hostile probe found (docs: Guarantees in
// README and docs/stores.md), each against a real Caddy and upstream.

// A header value cannot stand in for another delivery's body hash: with
// the default chain `header:Idempotency-Key body`, a delivery whose header
// spells out `sha256:<hex>` of a body B, or carries B itself as a long or
// non-ASCII value, must not claim the key B gets when it arrives without
// the header.
func TestE2EHeaderValueCannotClaimABodyHash(t *testing.T) {
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", proxySite(port, "webhook_idempotency source collide", up))
	url := siteURL(port) + "/hook"

	long := strings.Repeat("L", 300)
	for _, tc := range []struct {
		name, header string
		body         []byte // the victim's body, sent without the header
	}{
		{"spelled-out body hash", sha256Key(`{"id":"evt_victim","amount":100}`), []byte(`{"id":"evt_victim","amount":100}`)},
		{"long value equal to a body", long, []byte(long)},
		{"non-ASCII value equal to a body", "pagamento-ç", []byte("pagamento-ç")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.calls.Load()
			resp, body := post(t, url, []byte(`{"id":"evt_attacker"}`), "Idempotency-Key", tc.header)
			wantNew(t, resp, body, http.StatusOK)
			resp, body = post(t, url, tc.body)
			wantNew(t, resp, body, http.StatusOK)
			if got := up.calls.Load() - before; got != 2 {
				t.Fatalf("upstream called %d times, want 2: the header claimed the body's key", got)
			}
			// each is still deduplicated on its own key
			resp, _ = post(t, url, tc.body)
			if resp.Header.Get(replayedHeader) != "true" {
				t.Fatal("the victim's duplicate is not replayed")
			}
			resp, _ = post(t, url, []byte(`{"id":"evt_attacker"}`), "Idempotency-Key", tc.header)
			if resp.Header.Get(replayedHeader) != "true" {
				t.Fatal("the header's duplicate is not replayed")
			}
		})
	}
}

// keySHA256 is the `key-sha256:<hex>` form of a hashed key value.
func keySHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "key-sha256:" + hex.EncodeToString(sum[:])
}

var _ = bytes.Equal
var _ = fmt.Sprint
