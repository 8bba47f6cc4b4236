package providers

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// What the tests of the presets declared as blocks share: each delivery
// is verified by the preset, and by the generic `verify template` block
// docs/providers.md shows for it with the same key material, which must
// agree.

// route is a route's key material for a preset.
type route struct {
	secrets, publicKeys []string
}

// verifiers are a preset's verifier under a route's key material and, for
// a preset declared as a block, the generic block's.
func (rt route) verifiers(t *testing.T, preset string) []signature.Verifier {
	t.Helper()
	vs := []signature.Verifier{mustBuild(t, VerifyConfig{Scheme: preset, Secrets: rt.secrets, PublicKeys: rt.publicKeys})}
	p, ok := Lookup(preset)
	if !ok {
		t.Fatalf("no preset %s", preset)
	}
	if p.Block != "" {
		decl, err := parseDeclaration(p.Block)
		if err != nil {
			t.Fatal(err)
		}
		decl.Secrets, decl.PublicKeys = rt.secrets, rt.publicKeys
		vs = append(vs, mustBuild(t, decl))
	}
	return vs
}

// check verifies a delivery with every verifier of the route: want is the
// answer of each (nil: authentic).
func (rt route) check(t *testing.T, preset string, r *http.Request, body []byte, want *signature.Error) {
	t.Helper()
	for i, v := range rt.verifiers(t, preset) {
		if err := v.Verify(r, body); (err == nil) != (want == nil) || (want != nil && err.Error() != want.Reason) {
			what := "the preset"
			if i > 0 {
				what = "its block"
			}
			t.Errorf("%s: %s answers %v, want %v", preset, what, err, want)
		}
	}
}

// post is a POST to /hook with headers given as name, value pairs.
func post(header ...string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hook", nil)
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Add(header[i], header[i+1])
	}
	return r
}

// changeByte returns body with one byte changed.
func changeByte(body []byte) []byte {
	out := []byte(string(body))
	i := len(out) / 2
	out[i] ^= 0x01
	return out
}

// at runs f with the clock at a time: inside a synctest bubble, whose
// fake clock is advanced there, so a vector made at a fixed time verifies
// within its tolerance whatever the date of the run.
func at(t *testing.T, when time.Time, f func(t *testing.T)) {
	t.Helper()
	synctest.Test(t, func(t *testing.T) {
		time.Sleep(time.Until(when))
		f(t)
	})
}

// vectorsAt is the clock the Node packages signed and judged at
// (testdata/README.md).
var vectorsAt = time.Unix(1767225600, 0)

// nodeVectors reads testdata/<name>.json into v.
func nodeVectors(t *testing.T, name string, v any) {
	t.Helper()
	data, err := os.ReadFile("testdata/" + name + ".json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"produced_by"`) {
		t.Fatalf("%s.json says nothing of what produced it", name)
	}
}

// headerVectors are deliveries a provider's package signed in one header,
// with its verdict on each (testdata/<preset>.json).
type headerVectors struct {
	Secret  string
	Vectors []struct {
		Label, Body, Header string
		Verdict             bool
	}
}

// checkHeaderVectors reads testdata/<preset>.json and verifies its
// deliveries at the time they were judged: the preset accepts what the
// package accepted, and refuses the others (those labelled "stale" for
// their timestamp).
func checkHeaderVectors(t *testing.T, preset, header string) headerVectors {
	t.Helper()
	var vec headerVectors
	nodeVectors(t, preset, &vec)
	rt := route{secrets: []string{vec.Secret}}
	at(t, vectorsAt, func(t *testing.T) {
		for _, v := range vec.Vectors {
			want := signature.ErrInvalid
			switch {
			case v.Verdict:
				want = nil
			case v.Label == "stale":
				want = signature.ErrTimestamp
			}
			rt.check(t, preset, post(header, v.Header), []byte(v.Body), want)
		}
	})
	return vec
}

// standardDelivery is body signed with the Standard Webhooks reference
// library under libSecret (as it takes it: `whsec_` and base64, or
// base64), as the headers `<prefix>id`, `<prefix>timestamp` and
// `<prefix>signature` carry it.
func standardDelivery(t *testing.T, libSecret, prefix, id string, at time.Time, body []byte) []string {
	t.Helper()
	wh, err := standardwebhooks.NewWebhook(libSecret)
	if err != nil {
		t.Fatal(err)
	}
	sig, err := wh.Sign(id, at, body)
	if err != nil {
		t.Fatal(err)
	}
	return []string{prefix + "id", id, prefix + "timestamp", strconv.FormatInt(at.Unix(), 10), prefix + "signature", sig}
}

// keyOf is the value of the first source of a preset's default key that
// a delivery has (a `json:` or `header:` source), as the handler takes it:
// "" when it would fall back to the body.
func keyOf(t *testing.T, preset string, r *http.Request, body []byte) string {
	t.Helper()
	p, _ := Lookup(preset)
	for _, src := range p.DefaultKey {
		kind, name, _ := strings.Cut(src, ":")
		switch kind {
		case "json":
			if v := gjson.GetBytes(body, name); v.Exists() && v.Type != gjson.Null {
				return src + "=" + v.String()
			}
		case "header":
			if v := r.Header.Get(name); v != "" {
				return src + "=" + v
			}
		}
	}
	return ""
}
