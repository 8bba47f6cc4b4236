package webhookidempotency

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/tidwall/gjson"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/jsonmember"
)

// FuzzCaddyfile feeds arbitrary text after `webhook_idempotency` to the
// handler's Caddyfile parser. It must never panic; an error must name a
// line of the input; and a configuration it accepts must survive the JSON
// round trip that `caddy adapt` and a config load make.
func FuzzCaddyfile(f *testing.F) {
	for _, s := range []string{
		"",
		"source stripe header stripe-signature ttl 24h",
		"stripe {\n\tsecret {env.STRIPE_WEBHOOK_SECRET}\n}",
		"{\n\tverify hmac {\n\t\tsecret a\n\t\theader X\n\t}\n\tstore memory {\n\t\tmax_entries 1\n\t}\n}",
		"source a store memory {\n\tin_flight wait 1d\n}",
		"{\n\tverify {\n\t\t{\n\t\t}\n\t}\n}",
		"{\n\tstore memory {\n\t\tmax_entries 9999999999999999999999\n\t}\n}",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, rest string) {
		tokens, err := caddyfile.Tokenize([]byte("webhook_idempotency "+rest), "Testfile")
		if err != nil {
			return // the lexer refuses it before any directive sees it
		}
		h := new(Handler)
		err = h.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens))
		if err != nil {
			if !strings.Contains(err.Error(), ", at Testfile:") {
				t.Fatalf("error does not name a line: %q", err)
			}
			return
		}
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("marshal accepted config: %v", err)
		}
		var back Handler
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("accepted config %s does not unmarshal: %v", b, err)
		}
		b2, _ := json.Marshal(&back)
		if string(b) != string(b2) {
			t.Fatalf("JSON round trip changed the config:\n%s\n%s", b, b2)
		}
		if _, err := parseKeySources(back.Key); err != nil {
			t.Fatalf("parser accepted a key list that Provision refuses: %v", err)
		}
		if _, err := parseStatusSet(back.CacheStatus); err != nil {
			t.Fatalf("parser accepted cache_status that Provision refuses: %v", err)
		}
	})
}

// FuzzJSONKey sends hostile bodies, JSON paths and query strings through
// resolveKey. Paths that parseKeySource refuses (gjson query syntax among
// them) stop there; for every accepted path resolveKey must never panic,
// must be deterministic, and must always produce a valid key.
func FuzzJSONKey(f *testing.F) {
	for _, s := range []struct{ body, path, query string }{
		{`{"id":"evt_1"}`, "id", ""},
		{`{"entry":[{"changes":[{"value":{"messages":[{"id":"wamid.1"}]}}]}]}`, "entry.0.changes.0.value.messages.0.id", ""},
		{`{"id":1e999999}`, "id", "id=1"},
		{`{"a":[1,2,3]}`, "a.#", ""},
		{`{"a":[{"b":1},{"b":2}]}`, "a.#.b", ""},
		{`{"a":"x"}`, "a|@reverse", ""},
		{`{"a":"x"}`, "@this", ""},
		{`{"a":"x"}`, "*", ""},
		{`{"a":"\xff\xfe"}`, "a", "id=%ff"},
		{`{"a":"unterminated`, "a", ""},
		{strings.Repeat("[", 10000), "0.0.0.0", ""},
		{strings.Repeat(`{"a":`, 5000) + "1" + strings.Repeat("}", 5000), strings.Repeat("a.", 4999) + "a", ""},
	} {
		f.Add([]byte(s.body), s.path, s.query)
	}
	f.Fuzz(func(t *testing.T, body []byte, path, query string) {
		ks, err := parseKeySource("json:" + path)
		if err != nil {
			// a path the configuration refuses never reaches resolveKey;
			// gjson's query syntax must be among those refused
			return
		}
		if !strings.Contains(path, `\`) && strings.ContainsAny(path, "#*?|@!{}[]") {
			t.Fatalf("parseKeySource accepted json:%q, which uses gjson query syntax", path)
		}
		sources := []keySource{ks, {kind: keyQuery, arg: path}}
		r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/", RawQuery: query}, Header: http.Header{}}
		sum := sha256.Sum256(body)
		v1, from, err1 := resolveKey(sources, r, body, &sum)
		fromBody := from.kind == keyBody
		v2, _, err2 := resolveKey(sources, r, body, &sum)
		if (err1 == nil) != (err2 == nil) {
			t.Fatalf("resolveKey not deterministic: error %v then %v", err1, err2)
		}
		if err1 != nil {
			// an ambiguous body: refused, no key
			var amb *ambiguousError
			if !errors.As(err1, &amb) || v1 != "" {
				t.Fatalf("resolveKey error %v with key %q", err1, v1)
			}
			return
		}
		// on JSON that gives no member twice, the path reads what gjson
		// reads
		if res, ambiguous := jsonmember.Get(body, path); ambiguous == "" && gjson.ValidBytes(body) {
			if want := gjson.GetBytes(body, path); res.Type != want.Type || res.Raw != want.Raw || res.Str != want.Str {
				t.Fatalf("jsonmember.Get(%q) = %s %q, gjson reads %s %q", path, res.Type, res.Raw, want.Type, want.Raw)
			}
		}
		if v1 != v2 {
			t.Fatalf("resolveKey not deterministic: %q then %q", v1, v2)
		}
		if why := validKey(v1); why != "" {
			t.Fatalf("resolveKey(json:%q) = %q: %s", path, v1, why)
		}
		if fromBody && v1 != hashKey(&sum) {
			t.Fatalf("fromBody key %q is not the body hash", v1)
		}
	})
}
