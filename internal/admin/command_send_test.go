package admin

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// TestSendPutsTheIDWhereThePresetKeys: the delivery id goes in the first
// header of the preset's default key chain, else in the made-up body at
// its JSON key; the body always carries it in id.
func TestSendPutsTheIDWhereThePresetKeys(t *testing.T) {
	for _, p := range providers.All() {
		name := p.Name
		d := newDelivery(&sendFlags{preset: name, id: "evt_42", headers: http.Header{}})
		if !json.Valid(d.body) || gjson.GetBytes(d.body, "id").String() != "evt_42" {
			t.Errorf("%s: body %s", name, d.body)
		}
		if d.headers.Get("Content-Type") != "application/json" {
			t.Errorf("%s: Content-Type %q", name, d.headers.Get("Content-Type"))
		}
		k := p.DefaultKey[0]
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

// TestSendListsPresets: `send list` names every preset with what it signs
// with (package providers declares each preset's signer).
func TestSendListsPresets(t *testing.T) {
	var list strings.Builder
	printPresets(&list)
	listed := map[string]string{}
	for _, line := range strings.Split(list.String(), "\n")[1:] {
		if name, needs, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			listed[name] = strings.TrimSpace(needs)
		}
	}
	for _, name := range providers.Names() {
		want := cmp.Or(providers.SignerNeeds(name), "cannot be signed by this command")
		if listed[name] != want {
			t.Errorf("send list gives %s %q, want %q:\n%s", name, listed[name], want, list.String())
		}
	}
}
