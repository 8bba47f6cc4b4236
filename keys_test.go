package webhookidempotency

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// sha256Key is the `sha256:<hex>` form of s.
func sha256Key(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// validKey reports why v is not a valid key value: non-empty, printable
// ASCII of at most 200 bytes, and a `sha256:` or `key-sha256:` prefix only
// before 64 lower-case hex digits.
func validKey(v string) string {
	if v == "" {
		return "empty"
	}
	if len(v) > maxKeyValueLen {
		return "longer than 200 bytes"
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return "not printable ASCII"
		}
	}
	for _, prefix := range []string{bodyHashPrefix, valueHashPrefix} {
		if rest, ok := strings.CutPrefix(v, prefix); ok {
			if _, err := hex.DecodeString(rest); err != nil || len(rest) != 64 || strings.ToLower(rest) != rest {
				return "malformed " + prefix + " hex"
			}
		}
	}
	return ""
}

func TestParseKeySource(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want keySource
	}{
		{"body", keySource{kind: keyBody}},
		{"header:idempotency-key", keySource{kind: keyHeader, arg: "Idempotency-Key"}},
		{"header:X-GITHUB-DELIVERY", keySource{kind: keyHeader, arg: "X-Github-Delivery"}},
		{"header:webhook-id", keySource{kind: keyHeader, arg: "Webhook-Id"}},
		{"json:data.object.id", keySource{kind: keyJSON, arg: "data.object.id"}},
		{"json:a:b", keySource{kind: keyJSON, arg: "a:b"}},
		{"json:entry.0.changes.0.value.messages.0.id", keySource{kind: keyJSON, arg: "entry.0.changes.0.value.messages.0.id"}},
		{`json:a\.b.c\*`, keySource{kind: keyJSON, arg: `a\.b.c\*`}},
		{"query:data.id", keySource{kind: keyQuery, arg: "data.id"}},
		{"query:a b", keySource{kind: keyQuery, arg: "a b"}},
		{"header:X_Custom.Id~1", keySource{kind: keyHeader, arg: "X_custom.id~1"}},
	} {
		got, err := parseKeySource(tc.in)
		if err != nil {
			t.Errorf("parseKeySource(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want {
			t.Errorf("parseKeySource(%q) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
	for _, in := range []string{"", "Body", "body:", "header", "header:", "json:", "query:", "cookie:x", ":x", "id", "header:X Id", "header:X-Id:", "header:é", "header:(x)"} {
		if got, err := parseKeySource(in); err == nil {
			t.Errorf("parseKeySource(%q) = %+v, want an error", in, got)
		} else if !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseKeySource(%q) error %q does not quote the source", in, err)
		}
	}
	// gjson query syntax and malformed paths are refused with the reason
	for in, why := range map[string]string{
		"json:a.#":         "gjson query syntax '#'",
		"json:a.#(b==1).c": "gjson query syntax '#'",
		"json:ab*":         "gjson query syntax '*'",
		"json:a?c":         "gjson query syntax '?'",
		"json:a|b":         "gjson query syntax '|'",
		"json:@pretty":     "gjson query syntax '@'",
		"json:a.@reverse":  "gjson query syntax '@'",
		"json:{a,b}":       "gjson query syntax '{'",
		"json:[a,b]":       "gjson query syntax '['",
		"json:!true":       "gjson query syntax '!'",
		"json:..0":         "empty segment",
		"json:a..b":        "empty segment",
		"json:a.":          "empty segment",
		"json:.a":          "empty segment",
		`json:a\`:          `lone '\'`,
	} {
		_, err := parseKeySource(in)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("parseKeySource(%q): error %v, want one naming the source and %q", in, err, why)
		}
	}
	if _, err := parseKeySources([]string{"body", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("parseKeySources with a bad entry: error %v, want one naming \"nope\"", err)
	}
}

// resolve runs resolveKey the way the handler does.
func resolve(t *testing.T, keys []string, target string, header http.Header, body string) (string, bool) {
	t.Helper()
	sources, err := parseKeySources(keys)
	if err != nil {
		t.Fatalf("parseKeySources(%q): %v", keys, err)
	}
	r := httptest.NewRequest(http.MethodPost, target, strings.NewReader(body))
	for k, vs := range header {
		r.Header[k] = vs
	}
	sum := sha256.Sum256([]byte(body))
	v, from, err := resolveKey(sources, r, []byte(body), &sum)
	if err != nil {
		t.Fatalf("resolveKey(%q): %v", keys, err)
	}
	return v, from.kind == keyBody
}

func TestResolveKey(t *testing.T) {
	whatsapp := `{"object":"whatsapp_business_account","entry":[{"id":"1","changes":[{"value":{"messages":[{"id":"wamid.HBgM","type":"text"}]},"field":"messages"}]}]}`
	long := strings.Repeat("x", 201)
	exact := strings.Repeat("y", 200)
	for _, tc := range []struct {
		name     string
		keys     []string
		target   string
		header   http.Header
		body     string
		want     string
		wantBody bool
	}{
		{
			name: "header, any case in the config", keys: []string{"header:idempotency-key", "body"},
			header: http.Header{"Idempotency-Key": {"abc"}}, body: "{}", want: "abc",
		},
		{
			name: "header value trimmed", keys: []string{"header:X-Id"},
			header: http.Header{"X-Id": {"  evt 1 \t"}}, body: "{}", want: "evt 1",
		},
		{
			name: "first header value wins", keys: []string{"header:X-Id"},
			header: http.Header{"X-Id": {"first", "second"}}, body: "{}", want: "first",
		},
		{
			name: "blank header falls through", keys: []string{"header:X-Id", "json:id"},
			header: http.Header{"X-Id": {"   "}}, body: `{"id":"evt_2"}`, want: "evt_2",
		},
		{
			name: "json top-level string", keys: []string{"json:id", "body"},
			body: `{"id":"evt_1NG8Du2eZvKYlo2C","object":"event"}`, want: "evt_1NG8Du2eZvKYlo2C",
		},
		{
			name: "json nested path", keys: []string{"json:data.object.id"},
			body: `{"data":{"object":{"id":"pi_123"}}}`, want: "pi_123",
		},
		{
			name: "json path through arrays", keys: []string{"json:entry.0.changes.0.value.messages.0.id", "body"},
			body: whatsapp, want: "wamid.HBgM",
		},
		{
			name: "json escaped dot in a name", keys: []string{`json:meta\.id`},
			body: `{"meta.id":"m1","meta":{"id":"wrong"}}`, want: "m1",
		},
		{
			name: "json integer kept as written", keys: []string{"json:id"},
			body: `{"id":12345678901234567890}`, want: "12345678901234567890",
		},
		{
			name: "json float kept as written", keys: []string{"json:n"},
			body: `{"n":1.50e3}`, want: "1.50e3",
		},
		{
			name: "json boolean", keys: []string{"json:ok"},
			body: `{"ok":true}`, want: "true",
		},
		{
			name: "json escaped string is decoded", keys: []string{"json:id"},
			body: `{"id":"a\"b\/c"}`, want: `a"b/c`,
		},
		{
			name: "json object is its raw text", keys: []string{"json:id"},
			body: `{"id":{"a":1}}`, want: `{"a":1}`,
		},
		{
			name: "json null falls through", keys: []string{"json:id", "header:X-Id"},
			header: http.Header{"X-Id": {"h"}}, body: `{"id":null}`, want: "h",
		},
		{
			name: "json empty string falls through", keys: []string{"json:id", "query:id"},
			target: "/hook?id=q", body: `{"id":""}`, want: "q",
		},
		{
			name: "json missing path falls through to body", keys: []string{"json:data.id", "body"},
			body: `{"id":"x"}`, want: sha256Key(`{"id":"x"}`), wantBody: true,
		},
		{
			name: "json on a non-JSON body falls through", keys: []string{"json:id", "body"},
			body: `id=1&x=2`, want: sha256Key(`id=1&x=2`), wantBody: true,
		},
		{
			name: "query", keys: []string{"query:data.id"},
			target: "/hook?type=payment&data.id=123", body: "", want: "123",
		},
		{
			name: "query with escapes", keys: []string{"query:id"},
			target: "/hook?id=a%20b%2Bc+d", body: "", want: "a b+c d",
		},
		{
			name: "query with an escaped name", keys: []string{"query:data.id"},
			target: "/hook?data%2Eid=9", body: "", want: "9",
		},
		{
			name: "query first value wins", keys: []string{"query:id"},
			target: "/hook?id=1&id=2", body: "", want: "1",
		},
		{
			name: "query bad escape kept raw", keys: []string{"query:id"},
			target: "/hook?id=100%", body: "", want: "100%",
		},
		{
			name: "query name is not a prefix match", keys: []string{"query:id", "body"},
			target: "/hook?idx=1", body: "b", want: sha256Key("b"), wantBody: true,
		},
		{
			name: "query empty value falls through", keys: []string{"query:id", "header:X-Id"},
			target: "/hook?id=", header: http.Header{"X-Id": {"h"}}, body: "", want: "h",
		},
		{
			name: "body", keys: []string{"body"},
			body: "hello", want: sha256Key("hello"), wantBody: true,
		},
		{
			name: "empty body hashes too", keys: []string{"body"},
			body: "", want: sha256Key(""), wantBody: true,
		},
		{
			name: "body stops the chain", keys: []string{"body", "header:X-Id"},
			header: http.Header{"X-Id": {"h"}}, body: "b", want: sha256Key("b"), wantBody: true,
		},
		{
			name: "fallback order: header, json, query", keys: []string{"header:X-Id", "json:id", "query:id", "body"},
			target: "/hook?id=q", body: `{"id":"j"}`, want: "j",
		},
		{
			name: "nothing matches and no body source: body hash", keys: []string{"header:X-Id", "json:id"},
			body: `{}`, want: sha256Key(`{}`), wantBody: true,
		},
		{
			name: "exactly 200 bytes kept", keys: []string{"header:X-Id"},
			header: http.Header{"X-Id": {exact}}, body: "", want: exact,
		},
		{
			name: "201 bytes hashed", keys: []string{"header:X-Id"},
			header: http.Header{"X-Id": {long}}, body: "", want: keySHA256(long),
		},
		{
			name: "non-ASCII hashed", keys: []string{"json:id"},
			body: `{"id":"pedido-ção"}`, want: keySHA256("pedido-ção"),
		},
		{
			name: "control character hashed", keys: []string{"json:id"},
			body: `{"id":"a\nb"}`, want: keySHA256("a\nb"),
		},
		{
			name: "a value spelling out another body's hash is hashed", keys: []string{"header:X-Id", "body"},
			header: http.Header{"X-Id": {sha256Key("c")}}, body: "b", want: keySHA256(sha256Key("c")),
		},
		{
			// what an inbox or a redelivery sends for a body-keyed event:
			// the same key at every hop (issue 22)
			name: "a value spelling out this body's hash is the body's key", keys: []string{"header:X-Id", "body"},
			header: http.Header{"X-Id": {sha256Key("b")}}, body: "b", want: sha256Key("b"),
		},
		{
			name: "a body hash spelled in upper case is hashed", keys: []string{"header:X-Id", "body"},
			header: http.Header{"X-Id": {strings.ToUpper(sha256Key("b"))}}, body: "b", want: strings.ToUpper(sha256Key("b")),
		},
		{
			name: "a value spelling out a hashed value is hashed", keys: []string{"json:id"},
			body: `{"id":"key-sha256:abc"}`, want: keySHA256("key-sha256:abc"),
		},
		{
			name: "a prefix in another case is kept", keys: []string{"query:id"},
			target: "/hook?id=SHA256:abc", body: "", want: "SHA256:abc",
		},
		{
			name: "DEL hashed", keys: []string{"query:id"},
			target: "/hook?id=a%7Fb", body: "", want: keySHA256("a\x7fb"),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := tc.target
			if target == "" {
				target = "/hook"
			}
			got, fromBody := resolve(t, tc.keys, target, tc.header, tc.body)
			if got != tc.want || fromBody != tc.wantBody {
				t.Errorf("resolveKey(%q) = %q, fromBody %v; want %q, fromBody %v", tc.keys, got, fromBody, tc.want, tc.wantBody)
			}
			if why := validKey(got); why != "" {
				t.Errorf("resolveKey(%q) = %q: not a valid key: %s", tc.keys, got, why)
			}
		})
	}
}

func TestKeyStoreLayout(t *testing.T) {
	for _, tc := range []struct {
		name       string
		handler    Handler
		header     http.Header
		body       string
		wantPrefix string
		wantKey    string
	}{
		{
			name:       "preset source and its default key",
			handler:    Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Scheme: "off"}},
			body:       `{"id":"evt_1NG8Du2eZvKYlo2C"}`,
			wantPrefix: "idem:stripe:",
			wantKey:    "idem:stripe:evt_1NG8Du2eZvKYlo2C",
		},
		{
			name:       "body hash key",
			handler:    Handler{Provider: "whatsapp", Verify: &providers.VerifyConfig{Scheme: "off"}},
			body:       "test",
			wantPrefix: "idem:whatsapp:",
			wantKey:    "idem:whatsapp:sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		},
		{
			name:       "explicit source overrides the preset's",
			handler:    Handler{Provider: "github", Source: "gh_org", Verify: &providers.VerifyConfig{Scheme: "off"}},
			header:     http.Header{"X-Github-Delivery": {"72d3162e"}},
			body:       "{}",
			wantPrefix: "idem:gh_org:",
			wantKey:    "idem:gh_org:72d3162e",
		},
		{
			name:       "generic default key",
			handler:    Handler{Source: "app"},
			header:     http.Header{"Idempotency-Key": {"k1"}},
			body:       "{}",
			wantPrefix: "idem:app:",
			wantKey:    "idem:app:k1",
		},
		{
			name:       "generic default key falls back to the body",
			handler:    Handler{Source: "app"},
			body:       "test",
			wantPrefix: "idem:app:",
			wantKey:    "idem:app:sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := testkit.NewContext(t)
			defer cancel()
			h := tc.handler
			if err := h.Provision(ctx); err != nil {
				t.Fatalf("provision: %v", err)
			}
			defer h.Cleanup()
			if h.keyPrefix != tc.wantPrefix {
				t.Errorf("keyPrefix = %q, want %q", h.keyPrefix, tc.wantPrefix)
			}
			r := httptest.NewRequest(http.MethodPost, "/hook", strings.NewReader(tc.body))
			for k, vs := range tc.header {
				r.Header[k] = vs
			}
			sum := sha256.Sum256([]byte(tc.body))
			v, _, err := resolveKey(h.keys, r, []byte(tc.body), &sum)
			if err != nil {
				t.Fatal(err)
			}
			if got := h.keyPrefix + v; got != tc.wantKey {
				t.Errorf("store key = %q, want %q", got, tc.wantKey)
			}
		})
	}
}

// A source with ':' (or a brace) would let the store keys of two routes be
// the same string; JSON refuses it as the Caddyfile does.
func TestKeySourceNamespaceInJSON(t *testing.T) {
	for _, source := range []string{"a:b", "{a}", "a}"} {
		ctx, cancel := testkit.NewContext(t)
		h := Handler{Source: source}
		err := h.Provision(ctx)
		cancel()
		if err == nil || err.Error() != "invalid source '"+source+"': it must not contain ':', '{' or '}'" {
			t.Errorf("source %q: provision error %v", source, err)
		}
	}
}

// keySHA256 is the `key-sha256:<hex>` form of a hashed key value.
func keySHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "key-sha256:" + hex.EncodeToString(sum[:])
}
