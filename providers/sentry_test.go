package providers

import (
	"crypto/sha256"
	"encoding/json"
	"os"
	"testing"
)

// Sentry: Sentry-Hook-Signature, the HMAC-SHA256 hex of the body under the
// integration's client secret (SentryApp.build_signature). The vectors are
// Sentry's own code run with Python (testdata/sentry-build-signature.json).
func TestSentry(t *testing.T) {
	var vecs struct {
		ClientSecret string `json:"client_secret"`
		Vectors      []struct {
			Body, Signature string
		}
	}
	data, err := os.ReadFile("testdata/sentry-build-signature.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &vecs); err != nil {
		t.Fatal(err)
	}
	if len(vecs.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, vec := range vecs.Vectors {
		checkVectorBodyHMAC(t, "sentry", "Sentry-Hook-Signature", vecs.ClientSecret, vec.Signature, []byte(vec.Body))
	}
	c := bodyHMACCase{preset: "sentry", header: "Sentry-Hook-Signature", sign: hmacOf(sha256.New, "", false)}
	checkBodyHMAC(t, c, vecs.ClientSecret, []byte(vecs.Vectors[0].Body))
	p := wantPreset(t, "sentry", []string{"body"}, 0, nil)
	// Request-ID and the unsigned timestamp are drawn anew for every
	// attempt: a key on them deduplicates nothing
	for _, h := range []string{"Request-ID", "Sentry-Hook-Timestamp"} {
		if name, ok := VolatileHeader(h, "sentry"); !ok || name != p.Name {
			t.Errorf("%s not volatile", h)
		}
	}
}
