package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// TestEveryPresetSigns: every signer of `caddy webhook-idempotency send`
// is a preset's and says what it signs with, and refuses to build without
// key material; a preset of the table without a signer (one just added to
// providers.go) is listed as such and refused with a clear message, not
// sent unsigned: give it a signer in presetSigners (providers_sign.go),
// built on package signature.
func TestEveryPresetSigns(t *testing.T) {
	var list strings.Builder
	printPresets(&list)
	for name := range providers {
		ps, ok := presetSigners[name]
		if !ok {
			t.Logf("preset %s has no signer yet", name)
			if !strings.Contains(list.String(), name) || !strings.Contains(list.String(), "cannot be signed by this command") {
				t.Errorf("send list does not say that %s cannot be signed:\n%s", name, list.String())
			}
			if _, err := newPresetSigner(name, signConfig{Secret: "x"}); err == nil || !strings.Contains(err.Error(), "cannot be signed by this command") {
				t.Errorf("%s: %v", name, err)
			}
			continue
		}
		if ps.needs == "" || ps.build == nil {
			t.Errorf("preset %s: signer without what it needs or how it is built", name)
		}
		if _, err := ps.build(signConfig{}); err == nil {
			t.Errorf("preset %s signs with no key material at all", name)
		}
		if !strings.Contains(list.String(), fmt.Sprintf("%-12s %s", name, ps.needs)) {
			t.Errorf("send list does not list %s with %q:\n%s", name, ps.needs, list.String())
		}
	}
	for name := range presetSigners {
		if _, ok := providers[name]; !ok {
			t.Errorf("presetSigners has %s, which is no preset", name)
		}
	}
}

// TestSendPutsTheIDWhereThePresetKeys: the delivery id goes in the first
// header of the preset's default key chain, else in the made-up body at
// its JSON key; the body always carries it in id.
func TestSendPutsTheIDWhereThePresetKeys(t *testing.T) {
	for name, p := range providers {
		d := newDelivery(&sendFlags{preset: name, id: "evt_42", headers: http.Header{}})
		if !json.Valid(d.body) || gjson.GetBytes(d.body, "id").String() != "evt_42" {
			t.Errorf("%s: body %s", name, d.body)
		}
		if d.headers.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type %q", name, d.headers.Get("Content-Type"))
		}
		k := p.defaultKey[0]
		if h, ok := strings.CutPrefix(k, "header:"); ok && d.headers.Get(h) != "evt_42" {
			t.Errorf("%s: header %s is %q", name, h, d.headers.Get(h))
		}
		if path, ok := strings.CutPrefix(k, "json:"); ok && gjson.GetBytes(d.body, path).String() != "evt_42" {
			t.Errorf("%s: %s in %s", name, path, d.body)
		}
	}
	// a given body and header are kept as they are
	d := newDelivery(&sendFlags{preset: "github", id: "d1", body: []byte("a=b"), bodyGiven: true, headers: http.Header{"X-Github-Delivery": {"mine"}}})
	if string(d.body) != "a=b" || d.headers.Get("X-GitHub-Delivery") != "mine" || d.headers.Get("Content-Type") != "" {
		t.Fatalf("given body and header: %q %v", d.body, d.headers)
	}
	m := map[string]any{"data": "x"}
	setJSONPath(m, []string{"data", "id"}, "v")
	setJSONPath(m, []string{"a", "b", "c"}, "w")
	if b, _ := json.Marshal(m); string(b) != `{"a":{"b":{"c":"w"}},"data":"x"}` {
		t.Fatalf("setJSONPath: %s", b)
	}
}

// TestEventIDOrder: tail orders archive ids by time, then sequence.
func TestEventIDOrder(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		less bool
	}{
		{"1700000000000-0", "1700000000000-1", true},
		{"1700000000000-9", "1700000000000-10", true},
		{"999-5", "1000-0", true},
		{"1000-0", "1000-0", false},
		{"1001-0", "1000-7", false},
	} {
		if got := eventIDLess(tc.a, tc.b); got != tc.less {
			t.Errorf("%s < %s: %v", tc.a, tc.b, got)
		}
	}
}
