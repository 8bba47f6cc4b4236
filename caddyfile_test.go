package webhookidempotency

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

func dur(d time.Duration) caddy.Duration { return caddy.Duration(d) }

// parseTestHandler runs the handler's Caddyfile parser over input.
func parseTestHandler(input string) (*Handler, error) {
	h := new(Handler)
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
	return h, err
}

// wantParsed checks that input parses to want, compared as the JSON Caddy
// loads (normalised: the store module's keys come out sorted).
func wantParsed(t *testing.T, input string, want *Handler) {
	t.Helper()
	h, err := parseTestHandler(input)
	if err != nil {
		t.Fatalf("parse %q: unexpected error: %v", input, err)
	}
	got, wantJSON := normalizeJSON(t, []byte(handlerJSON(t, h))), normalizeJSON(t, []byte(handlerJSON(t, want)))
	if got != wantJSON {
		t.Errorf("parse %q:\n got  %s\n want %s", input, got, wantJSON)
	}
}

// wantParseError checks that parsing input fails with exactly the error
// message want.
func wantParseError(t *testing.T, input, want string) {
	t.Helper()
	h, err := parseTestHandler(input)
	if err == nil {
		t.Fatalf("parse %q: want error %q, got none (handler %s)", input, want, handlerJSON(t, h))
	}
	if err.Error() != want {
		t.Errorf("parse %q:\n got error  %q\n want error %q", input, err.Error(), want)
	}
}

// handlerJSON marshals the configuration fields of h, the form that
// `caddy adapt` writes and that Caddy loads.
func handlerJSON(t *testing.T, h *Handler) string {
	t.Helper()
	b, err := json.Marshal(h)
	if err != nil {
		t.Fatalf("marshal handler: %v", err)
	}
	return string(b)
}

func TestCaddyfileParse(t *testing.T) {
	memoryStore := json.RawMessage(`{"module":"memory"}`)
	for _, tc := range []struct {
		name  string
		input string
		want  Handler
	}{
		{
			name:  "inline form of the brief",
			input: `webhook_idempotency source stripe header stripe-signature ttl 24h`,
			want:  Handler{Source: "stripe", Key: []string{"header:stripe-signature", "body"}, TTL: dur(24 * time.Hour)},
		},
		{
			name: "stone with its key material at the top and in verify",
			input: `webhook_idempotency stone private_key {file./run/secrets/stone.pem} {
				decrypt
				verify {
					jwks_url https://sandbox-api.openbank.stone.com.br/api/v1/discovery/keys
				}
			}`,
			want: Handler{Provider: "stone", Verify: &providers.VerifyConfig{
				PrivateKey: "{file./run/secrets/stone.pem}",
				JWKSURL:    "https://sandbox-api.openbank.stone.com.br/api/v1/discovery/keys",
				Decrypt:    true,
			}},
		},
		{
			name:  "evolution and asaas take a secret inline",
			input: `webhook_idempotency asaas secret {env.ASAAS_TOKEN}`,
			want:  Handler{Provider: "asaas", Verify: &providers.VerifyConfig{Secrets: []string{"{env.ASAAS_TOKEN}"}}},
		},
		{
			name: "generic jwt",
			input: `webhook_idempotency {
				source internal
				verify jwt {
					header    X-Token
					prefix    "JWT "
					tolerance 1m
					secret    {env.JWT_KEY}
				}
			}`,
			want: Handler{Source: "internal", Verify: &providers.VerifyConfig{Scheme: "jwt", Header: "X-Token", Prefix: "JWT ", Tolerance: dur(time.Minute), Secrets: []string{"{env.JWT_KEY}"}}},
		},
		{
			name:  "bare directive",
			input: `webhook_idempotency`,
			want:  Handler{},
		},
		{
			name:  "empty block",
			input: "webhook_idempotency {\n}",
			want:  Handler{},
		},
		{
			name: "provider positional with a placeholder secret kept literal",
			input: `webhook_idempotency stripe {
				secret {env.STRIPE_WEBHOOK_SECRET}
			}`,
			want: Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"{env.STRIPE_WEBHOOK_SECRET}"}}},
		},
		{
			name:  "provider positional alone",
			input: `webhook_idempotency github`,
			want:  Handler{Provider: "github"},
		},
		{
			name:  "provider positional then inline options",
			input: `webhook_idempotency shopify source shop_eu ttl 1d lease 45s`,
			want:  Handler{Provider: "shopify", Source: "shop_eu", TTL: dur(24 * time.Hour), Lease: dur(45 * time.Second)},
		},
		{
			name: "inline and block options mixed",
			input: `webhook_idempotency source app fail closed {
				ttl 2h
				mismatch reject
				max_body 1MiB
			}`,
			want: Handler{Source: "app", Fail: "closed", TTL: dur(2 * time.Hour), Mismatch: "reject", MaxBody: 1 << 20},
		},
		{
			name:  "every single-value option inline",
			input: `webhook_idempotency source s provider slack secret a verify off key json:event_id ttl 1h lease 10s in_flight proceed cache_status 2xx mismatch reject max_body 512KB body_timeout 30s max_response 2048 methods post fail closed store memory`,
			want: Handler{
				Source: "s", Provider: "slack", Verify: &providers.VerifyConfig{Scheme: "off", Secrets: []string{"a"}},
				Key: []string{"json:event_id"}, TTL: dur(time.Hour), Lease: dur(10 * time.Second),
				InFlight: "proceed", CacheStatus: []string{"2xx"}, Mismatch: "reject",
				MaxBody: 512000, BodyTimeout: dur(30 * time.Second), MaxResponse: 2048, Methods: []string{"POST"}, Fail: "closed",
				StoreRaw: memoryStore,
			},
		},
		{
			name: "every subdirective of the block",
			input: `webhook_idempotency {
				source        orders
				provider      github
				secret        s1 s2
				verify        hmac {
					secret    s3
					header    X-Signature
					algorithm sha512
					encoding  base64
					prefix    sha512=
					tolerance 2m
					url       https://example.com/hook
				}
				key           header:X-Id json:data.object.id query:id body
				ttl           1d
				lease         1m
				in_flight     wait 3s
				cache_status  200 201 4xx
				mismatch      reject
				max_body      1MiB
				body_timeout  5s
				max_response  512KB
				methods       POST put
				fail          closed
				store         memory {
					max_entries 1000
				}
			}`,
			want: Handler{
				Source: "orders", Provider: "github",
				Verify: &providers.VerifyConfig{
					Scheme: "hmac", Secrets: []string{"s1", "s2", "s3"}, Header: "X-Signature",
					Algorithm: "sha512", Encoding: "base64", Prefix: "sha512=",
					Tolerance: dur(2 * time.Minute), URL: "https://example.com/hook",
				},
				Key:         []string{"header:X-Id", "json:data.object.id", "query:id", "body"},
				TTL:         dur(24 * time.Hour),
				Lease:       dur(time.Minute),
				InFlight:    "wait",
				WaitTimeout: dur(3 * time.Second),
				CacheStatus: []string{"200", "201", "4xx"},
				Mismatch:    "reject",
				MaxBody:     1 << 20,
				BodyTimeout: dur(5 * time.Second),
				MaxResponse: 512000,
				Methods:     []string{"POST", "PUT"},
				Fail:        "closed",
				StoreRaw:    json.RawMessage(`{"module":"memory","max_entries":1000}`),
			},
		},
		{
			name:  "verify off inline after a preset",
			input: `webhook_idempotency stripe verify off`,
			want:  Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Scheme: "off"}},
		},
		{
			name:  "verify off in the block",
			input: "webhook_idempotency whatsapp {\n\tverify off\n}",
			want:  Handler{Provider: "whatsapp", Verify: &providers.VerifyConfig{Scheme: "off"}},
		},
		{
			name:  "verify without a scheme keeps the preset's and sets its options",
			input: "webhook_idempotency stripe {\n\tverify {\n\t\ttolerance 10m\n\t\tsecret {file./run/secrets/stripe}\n\t}\n}",
			want:  Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Tolerance: dur(10 * time.Minute), Secrets: []string{"{file./run/secrets/stripe}"}}},
		},
		{
			name:  "verify token with a header",
			input: "webhook_idempotency source evo {\n\tverify token {\n\t\theader apikey\n\t\tsecret {env.EVO}\n\t}\n}",
			want:  Handler{Source: "evo", Verify: &providers.VerifyConfig{Scheme: "token", Header: "apikey", Secrets: []string{"{env.EVO}"}}},
		},
		{
			name:  "verify algorithms and hex encoding",
			input: "webhook_idempotency {\n\tverify hmac {\n\t\talgorithm sha1\n\t\tencoding hex\n\t\turl {env.PUBLIC_URL}\n\t}\n}",
			want:  Handler{Verify: &providers.VerifyConfig{Scheme: "hmac", Algorithm: "sha1", Encoding: "hex", URL: "{env.PUBLIC_URL}"}},
		},
		{
			name:  "secret rotation accumulates",
			input: "webhook_idempotency stripe {\n\tsecret old\n\tsecret new newer\n}",
			want:  Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"old", "new", "newer"}}},
		},
		{
			name:  "in_flight wait without timeout",
			input: "webhook_idempotency {\n\tin_flight wait\n}",
			want:  Handler{InFlight: "wait"},
		},
		{
			name:  "in_flight wait inline without timeout",
			input: `webhook_idempotency source a in_flight wait`,
			want:  Handler{Source: "a", InFlight: "wait"},
		},
		{
			name:  "in_flight wait with a day timeout",
			input: "webhook_idempotency {\n\tin_flight wait 1d\n}",
			want:  Handler{InFlight: "wait", WaitTimeout: dur(24 * time.Hour)},
		},
		{
			name:  "in_flight conflict",
			input: "webhook_idempotency {\n\tin_flight conflict\n}",
			want:  Handler{InFlight: "conflict"},
		},
		{
			name:  "cache_status codes and classes, over two lines",
			input: "webhook_idempotency {\n\tcache_status 200 2XX\n\tcache_status 404 3xx\n}",
			want:  Handler{CacheStatus: []string{"200", "2XX", "404", "3xx"}},
		},
		{
			name:  "sizes in plain bytes",
			input: "webhook_idempotency {\n\tmax_body 65536\n\tmax_response 1\n}",
			want:  Handler{MaxBody: 65536, MaxResponse: 1},
		},
		{
			name:  "keep_response: a size, or 0 for none",
			input: "webhook_idempotency {\n\tkeep_response 16KiB\n}",
			want:  Handler{KeepResponse: new(int64(16 << 10))},
		},
		{
			name:  "keep_response 0 on the directive line",
			input: "webhook_idempotency keep_response 0",
			want:  Handler{KeepResponse: new(int64(0))},
		},
		{
			name:  "sizes in decimal units",
			input: "webhook_idempotency {\n\tmax_body 2MB\n\tmax_response 512KB\n}",
			want:  Handler{MaxBody: 2000000, MaxResponse: 512000},
		},
		{
			name:  "durations with d and compound units",
			input: "webhook_idempotency {\n\tttl 7d\n\tlease 1m30s\n}",
			want:  Handler{TTL: dur(7 * 24 * time.Hour), Lease: dur(90 * time.Second)},
		},
		{
			name:  "methods upper-cased, accumulated",
			input: "webhook_idempotency {\n\tmethods post Patch\n\tmethods DELETE\n}",
			want:  Handler{Methods: []string{"POST", "PATCH", "DELETE"}},
		},
		{
			name:  "fail open",
			input: "webhook_idempotency {\n\tfail open\n}",
			want:  Handler{Fail: "open"},
		},
		{
			name:  "mismatch replay",
			input: "webhook_idempotency {\n\tmismatch replay\n}",
			want:  Handler{Mismatch: "replay"},
		},
		{
			name:  "store memory inline",
			input: `webhook_idempotency source a store memory ttl 1h`,
			want:  Handler{Source: "a", StoreRaw: memoryStore, TTL: dur(time.Hour)},
		},
		{
			name:  "store memory in the block without options",
			input: "webhook_idempotency {\n\tstore memory\n\tttl 1h\n}",
			want:  Handler{StoreRaw: memoryStore, TTL: dur(time.Hour)},
		},
		{
			name:  "store memory with max_entries, then more options",
			input: "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries 1000\n\t}\n\tttl 1h\n}",
			want:  Handler{StoreRaw: json.RawMessage(`{"module":"memory","max_entries":1000}`), TTL: dur(time.Hour)},
		},
		{
			name:  "store memory inline, the block is the handler's",
			input: "webhook_idempotency source a store memory {\n\tttl 1h\n}",
			want:  Handler{Source: "a", StoreRaw: memoryStore, TTL: dur(time.Hour)},
		},
		{
			name:  "key list over several lines keeps order",
			input: "webhook_idempotency {\n\tkey json:entry.0.changes.0.value.messages.0.id\n\tkey header:Idempotency-Key body\n}",
			want:  Handler{Key: []string{"json:entry.0.changes.0.value.messages.0.id", "header:Idempotency-Key", "body"}},
		},
		{
			name:  "header is shorthand for key header:<name> body",
			input: "webhook_idempotency {\n\theader X-GitHub-Delivery\n}",
			want:  Handler{Key: []string{"header:X-GitHub-Delivery", "body"}},
		},
		{
			name:  "provider subdirective",
			input: "webhook_idempotency {\n\tprovider paddle\n\tsource paddle_eu\n}",
			want:  Handler{Provider: "paddle", Source: "paddle_eu"},
		},
		{
			name:  "quoted values",
			input: "webhook_idempotency {\n\tsource \"my source\"\n\tverify hmac {\n\t\tprefix \"v1, \"\n\t}\n}",
			want:  Handler{Source: "my source", Verify: &providers.VerifyConfig{Scheme: "hmac", Prefix: "v1, "}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParsed(t, tc.input, &tc.want) })
	}
}

func TestCaddyfileParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  string // the whole error message
	}{
		// the directive line
		{"unknown provider", "webhook_idempotency strpie", "unknown provider or option 'strpie', at Testfile:1"},
		{"unknown option after preset", "webhook_idempotency stripe bogus 1", "unknown option 'bogus' on the directive line, at Testfile:1"},
		{"preset not in first place", "webhook_idempotency ttl 1h stripe", "unknown option 'stripe' on the directive line, at Testfile:1"},
		{"inline value missing", "webhook_idempotency source", "option 'source' on the directive line needs a value, at Testfile:1"},
		{"inline value missing after others", "webhook_idempotency source a ttl", "option 'ttl' on the directive line needs a value, at Testfile:1"},
		{"inline value missing before block", "webhook_idempotency source {\n}", "option 'source' on the directive line needs a value, at Testfile:1"},
		{"inline store missing type", "webhook_idempotency store", "store needs a type: file, memory or redis, at Testfile:1"},
		{"inline bad duration", "webhook_idempotency source a ttl 1x", `invalid ttl '1x': time: unknown unit "x" in duration "1x", at Testfile:1`},
		{"inline store with a url", "webhook_idempotency stripe store redis redis://localhost:6379 ttl 1h",
			"'redis://localhost:6379' follows 'store redis' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { store redis redis://localhost:6379 }, at Testfile:1"},
		{"inline file store with a path", "webhook_idempotency source a store file /var/lib/x.db",
			"'/var/lib/x.db' follows 'store file' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { store file /var/lib/x.db }, at Testfile:1"},
		{"inline cache_status classes", "webhook_idempotency source a cache_status 2xx 5xx",
			"'5xx' follows 'cache_status 2xx' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { cache_status 2xx 5xx }, at Testfile:1"},
		{"inline secrets", "webhook_idempotency stripe secret a b c ttl 1h",
			"'b' follows 'secret a' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { secret a b c }, at Testfile:1"},
		{"inline in_flight wait timeout", "webhook_idempotency source a in_flight wait 5s",
			"'5s' follows 'in_flight wait' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { in_flight wait 5s }, at Testfile:1"},
		{"inline methods", "webhook_idempotency source a methods POST PUT",
			"'PUT' follows 'methods POST' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { methods POST PUT }, at Testfile:1"},
		{"unknown option after a one-value option", "webhook_idempotency source a ttl 1h 2h", "unknown option '2h' on the directive line, at Testfile:1"},
		{"inline bad verify scheme", "webhook_idempotency verify sha", "unknown verify scheme 'sha': want a provider name, hmac, token, jwt, ed25519, rsa or off, at Testfile:1"},

		// the block
		{"unknown subdirective", "webhook_idempotency {\n\tsource a\n\tbogus 1\n}", "unrecognized subdirective 'bogus', at Testfile:3"},
		{"source missing", "webhook_idempotency {\n\tsource\n}", "'source' takes exactly one value, got 0, at Testfile:2"},
		{"source too many", "webhook_idempotency {\n\tsource a b\n}", "'source' takes exactly one value, got 2, at Testfile:2"},
		{"source empty", "webhook_idempotency {\n\tsource \"\"\n}", "'source' has an empty value, at Testfile:2"},
		{"source empty inline", "webhook_idempotency source \"\" ttl 1h", "'source' has an empty value, at Testfile:1"},
		{"header empty", "webhook_idempotency {\n\theader \"\"\n}", "'header' has an empty value, at Testfile:2"},
		{"header with a space", "webhook_idempotency {\n\theader \"X Id\"\n}", "invalid header 'X Id': not a valid header name, at Testfile:2"},
		{"header with a colon", "webhook_idempotency header X-Id:", "invalid header 'X-Id:': not a valid header name, at Testfile:1"},
		{"key header with a space", "webhook_idempotency {\n\tkey \"header:X Id\"\n}", `invalid key source "header:X Id": "X Id" is not a valid header name, at Testfile:2`},
		{"key empty", "webhook_idempotency {\n\tkey body \"\"\n}", "'key' has an empty value, at Testfile:2"},
		{"secret empty", "webhook_idempotency stripe {\n\tsecret a \"\"\n}", "'secret' has an empty value, at Testfile:2"},
		{"verify secret empty", "webhook_idempotency {\n\tverify hmac {\n\t\tsecret \"\"\n\t}\n}", "verify 'secret' has an empty value, at Testfile:3"},
		{"verify header empty", "webhook_idempotency {\n\tverify hmac {\n\t\theader \"\"\n\t}\n}", "verify 'header' has an empty value, at Testfile:3"},
		{"methods empty", "webhook_idempotency {\n\tmethods \"\"\n}", "'methods' has an empty value, at Testfile:2"},
		{"source with a colon", "webhook_idempotency {\n\tsource a:b\n}", "invalid source 'a:b': it must not contain ':', '{' or '}', at Testfile:2"},
		{"source with a placeholder", "webhook_idempotency {\n\tsource {env.X}\n}", "invalid source '{env.X}': it must not contain ':', '{' or '}', at Testfile:2"},
		{"provider unknown", "webhook_idempotency {\n\tprovider strpie\n}", "unknown provider 'strpie', at Testfile:2"},
		{"provider missing", "webhook_idempotency {\n\tprovider\n}", "'provider' takes exactly one value, got 0, at Testfile:2"},
		{"secret missing", "webhook_idempotency stripe {\n\tsecret\n}", "'secret' needs at least one value, at Testfile:2"},
		{"header missing", "webhook_idempotency {\n\theader\n}", "'header' takes exactly one value, got 0, at Testfile:2"},
		{"header too many", "webhook_idempotency {\n\theader a b\n}", "'header' takes exactly one value, got 2, at Testfile:2"},
		{"header after key", "webhook_idempotency {\n\tkey body\n\theader X-Id\n}", "'header' and 'key' both set the key: use one, at Testfile:3"},
		{"key after header", "webhook_idempotency {\n\theader X-Id\n\tkey body\n}", "'header' and 'key' both set the key: use one, at Testfile:3"},
		{"key after header inline", "webhook_idempotency header X-Id key body", "'header' and 'key' both set the key: use one, at Testfile:1"},
		{"key missing", "webhook_idempotency {\n\tkey\n}", "'key' needs at least one value, at Testfile:2"},
		{"key unknown kind", "webhook_idempotency {\n\tkey body xml:id\n}", `invalid key source "xml:id": unknown kind "xml" (want header, json, query or body), at Testfile:2`},
		{"key without argument", "webhook_idempotency {\n\tkey header:\n}", `invalid key source "header:": want header:<name>, json:<path>, query:<name> or body, at Testfile:2`},
		{"key bare word", "webhook_idempotency {\n\tkey id\n}", `invalid key source "id": want header:<name>, json:<path>, query:<name> or body, at Testfile:2`},
		{"ttl missing", "webhook_idempotency {\n\tttl\n}", "'ttl' takes exactly one value, got 0, at Testfile:2"},
		{"ttl too many", "webhook_idempotency {\n\tttl 1h 2h\n}", "'ttl' takes exactly one value, got 2, at Testfile:2"},
		{"ttl bad", "webhook_idempotency {\n\tttl forever\n}", `invalid ttl 'forever': time: invalid duration "forever", at Testfile:2`},
		{"ttl zero", "webhook_idempotency {\n\tttl 0s\n}", "invalid ttl '0s': must be positive, at Testfile:2"},
		{"ttl negative", "webhook_idempotency {\n\tttl -1h\n}", "invalid ttl '-1h': must be positive, at Testfile:2"},
		{"body_timeout missing", "webhook_idempotency {\n\tbody_timeout\n}", "'body_timeout' takes exactly one value, got 0, at Testfile:2"},
		{"body_timeout bad", "webhook_idempotency {\n\tbody_timeout soon\n}", `invalid body_timeout 'soon': time: invalid duration "soon", at Testfile:2`},
		{"body_timeout zero", "webhook_idempotency source s body_timeout 0s", "invalid body_timeout '0s': must be positive, at Testfile:1"},
		{"lease bad", "webhook_idempotency {\n\tlease 30\n}", `invalid lease '30': time: missing unit in duration "30", at Testfile:2`},
		{"in_flight missing", "webhook_idempotency {\n\tin_flight\n}", "'in_flight' needs at least one value, at Testfile:2"},
		{"in_flight unknown", "webhook_idempotency {\n\tin_flight queue\n}", "invalid in_flight 'queue': want conflict, wait [<timeout>] or proceed, at Testfile:2"},
		{"in_flight conflict with timeout", "webhook_idempotency {\n\tin_flight conflict 5s\n}", "in_flight conflict takes no timeout, at Testfile:2"},
		{"in_flight proceed with timeout", "webhook_idempotency {\n\tin_flight proceed 5s\n}", "in_flight proceed takes no timeout, at Testfile:2"},
		{"in_flight wait bad timeout", "webhook_idempotency {\n\tin_flight wait soon\n}", `invalid in_flight wait timeout 'soon': time: invalid duration "soon", at Testfile:2`},
		{"in_flight wait zero timeout", "webhook_idempotency {\n\tin_flight wait 0s\n}", "invalid in_flight wait timeout '0s': must be positive, at Testfile:2"},
		{"in_flight wait too many", "webhook_idempotency {\n\tin_flight wait 1s 2s\n}", "too many arguments to in_flight wait: want an optional timeout, at Testfile:2"},
		{"cache_status missing", "webhook_idempotency {\n\tcache_status\n}", "'cache_status' needs at least one value, at Testfile:2"},
		{"cache_status bad class", "webhook_idempotency {\n\tcache_status 2yy\n}", `invalid cache status "2yy": want a code 200-499 or a class 2xx, 3xx or 4xx, at Testfile:2`},
		{"cache_status class out of range", "webhook_idempotency {\n\tcache_status 6xx\n}", `invalid cache status "6xx": want a code 200-499 or a class 2xx, 3xx or 4xx, at Testfile:2`},
		{"cache_status code out of range", "webhook_idempotency {\n\tcache_status 200 600\n}", `invalid cache status "600": want a code 200-499 or a class 2xx, 3xx or 4xx, at Testfile:2`},
		{"cache_status word", "webhook_idempotency {\n\tcache_status ok\n}", `invalid cache status "ok": want a code 200-499 or a class 2xx, 3xx or 4xx, at Testfile:2`},
		{"cache_status 5xx class", "webhook_idempotency {\n\tcache_status 2xx 5xx\n}", `cache status "5xx" is never recorded: ` + statusNeverRecorded + `, at Testfile:2`},
		{"cache_status 5xx code", "webhook_idempotency {\n\tcache_status 503\n}", `cache status "503" is never recorded: ` + statusNeverRecorded + `, at Testfile:2`},
		{"cache_status 1xx code", "webhook_idempotency {\n\tcache_status 101\n}", `cache status "101" is never recorded: ` + statusNeverRecorded + `, at Testfile:2`},
		{"mismatch missing", "webhook_idempotency {\n\tmismatch\n}", "'mismatch' takes exactly one value, got 0, at Testfile:2"},
		{"mismatch unknown", "webhook_idempotency {\n\tmismatch ignore\n}", "invalid mismatch 'ignore': want replay or reject, at Testfile:2"},
		{"max_body missing", "webhook_idempotency {\n\tmax_body\n}", "'max_body' takes exactly one value, got 0, at Testfile:2"},
		{"max_body bad", "webhook_idempotency {\n\tmax_body lots\n}", `invalid max_body 'lots': strconv.ParseFloat: parsing "": invalid syntax, at Testfile:2`},
		{"max_body bad unit", "webhook_idempotency {\n\tmax_body 5MX\n}", `invalid max_body '5MX': unhandled size name: mx, at Testfile:2`},
		{"max_body zero", "webhook_idempotency {\n\tmax_body 0\n}", "invalid max_body '0': must be between 1 byte and 1TiB, at Testfile:2"},
		{"max_response bad", "webhook_idempotency {\n\tmax_response -1\n}", `invalid max_response '-1': strconv.ParseFloat: parsing "": invalid syntax, at Testfile:2`},
		{"keep_response too large", "webhook_idempotency {\n\tkeep_response 1MiB\n}", "invalid keep_response 1048576: want 0 (none) to 65536 bytes (64KiB), at Testfile:2"},
		{"keep_response bad", "webhook_idempotency {\n\tkeep_response lots\n}", "invalid keep_response 'lots': want a size such as 4KiB, or 0 for none, at Testfile:2"},
		{"methods missing", "webhook_idempotency {\n\tmethods\n}", "'methods' needs at least one value, at Testfile:2"},
		{"methods bad", "webhook_idempotency {\n\tmethods POST P0ST\n}", "invalid method 'P0ST', at Testfile:2"},
		{"fail missing", "webhook_idempotency {\n\tfail\n}", "'fail' takes exactly one value, got 0, at Testfile:2"},
		{"fail unknown", "webhook_idempotency {\n\tfail safe\n}", "invalid fail 'safe': want open or closed, at Testfile:2"},

		// verify
		{"verify unknown scheme", "webhook_idempotency {\n\tverify sha256\n}", "unknown verify scheme 'sha256': want a provider name, hmac, token, jwt, ed25519, rsa or off, at Testfile:2"},
		{"verify too many", "webhook_idempotency {\n\tverify hmac token\n}", "verify takes one scheme, got 2 arguments, at Testfile:2"},
		{"verify bare without a preset", "webhook_idempotency {\n\tsource a\n\tverify\n}",
			"'verify' needs a scheme (hmac, token, jwt, ed25519, rsa, a provider name, or off) unless the handler has a provider preset, at Testfile:3"},
		{"verify block without a scheme or preset", "webhook_idempotency {\n\tsource a\n\tverify {\n\t\tsecret x\n\t}\n}",
			"'verify' needs a scheme (hmac, token, jwt, ed25519, rsa, a provider name, or off) unless the handler has a provider preset, at Testfile:3"},
		{"verify unknown subdirective", "webhook_idempotency {\n\tverify hmac {\n\t\tsalt x\n\t}\n}", "unrecognized verify subdirective 'salt', at Testfile:3"},
		{"verify secret missing", "webhook_idempotency {\n\tverify hmac {\n\t\tsecret\n\t}\n}", "verify 'secret' needs at least one value, at Testfile:3"},
		{"verify header missing", "webhook_idempotency {\n\tverify hmac {\n\t\theader\n\t}\n}", "verify 'header' takes exactly one value, got 0, at Testfile:3"},
		{"verify header too many", "webhook_idempotency {\n\tverify hmac {\n\t\theader a b\n\t}\n}", "verify 'header' takes exactly one value, got 2, at Testfile:3"},
		{"verify algorithm bad", "webhook_idempotency {\n\tverify hmac {\n\t\talgorithm md5\n\t}\n}", "invalid algorithm 'md5': want sha1, sha256 or sha512, at Testfile:3"},
		{"verify algorithm missing", "webhook_idempotency {\n\tverify hmac {\n\t\talgorithm\n\t}\n}", "verify 'algorithm' takes exactly one value, got 0, at Testfile:3"},
		{"verify encoding bad", "webhook_idempotency {\n\tverify hmac {\n\t\tencoding base32\n\t}\n}", "invalid encoding 'base32': want hex or base64, at Testfile:3"},
		{"verify prefix missing", "webhook_idempotency {\n\tverify hmac {\n\t\tprefix\n\t}\n}", "verify 'prefix' takes exactly one value, got 0, at Testfile:3"},
		{"verify tolerance bad", "webhook_idempotency stripe {\n\tverify {\n\t\ttolerance 5\n\t}\n}", `invalid tolerance '5': time: missing unit in duration "5", at Testfile:3`},
		{"verify tolerance negative", "webhook_idempotency stripe {\n\tverify {\n\t\ttolerance -5m\n\t}\n}", "invalid tolerance '-5m': must be positive, at Testfile:3"},
		{"verify url relative", "webhook_idempotency twilio {\n\tverify {\n\t\turl /hook\n\t}\n}", "invalid url '/hook': want an absolute http:// or https:// URL with a host, at Testfile:3"},

		// store
		{"store missing type", "webhook_idempotency {\n\tstore\n}", "store needs a type: file, memory or redis, at Testfile:2"},
		{"store unknown", "webhook_idempotency {\n\tstore etcd\n}", "unknown store 'etcd': want file, memory or redis, at Testfile:2"},
		{"store memory argument", "webhook_idempotency {\n\tstore memory big\n}", "store memory takes no arguments, got 'big', at Testfile:2"},
		{"store memory unknown subdirective", "webhook_idempotency {\n\tstore memory {\n\t\tsize 10\n\t}\n}", "unrecognized memory store subdirective 'size', at Testfile:3"},
		{"store memory max_entries missing", "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries\n\t}\n}", "memory store 'max_entries' takes exactly one value, got 0, at Testfile:3"},
		{"store memory max_entries bad", "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries 10k\n\t}\n}", "invalid max_entries '10k': want a positive integer, at Testfile:3"},
		{"store memory max_entries zero", "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries 0\n\t}\n}", "invalid max_entries '0': want a positive integer, at Testfile:3"},
		{"store memory max_entries too many", "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries 10 20\n\t}\n}", "memory store 'max_entries' takes exactly one value, got 2, at Testfile:3"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}

func TestCaddyfileGlobalOption(t *testing.T) {
	for _, tc := range []struct {
		name, input, want string
	}{
		{"empty", "webhook_idempotency {\n}", `{}`},
		{"memory", "webhook_idempotency {\n\tstore memory\n}", `{"store":{"module":"memory"}}`},
		{"memory with options", "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries 50\n\t}\n}", `{"store":{"module":"memory","max_entries":50}}`},
		{"body budget", "webhook_idempotency {\n\tbody_budget 64MiB\n}", `{"body_budget":67108864}`},
		{"no body budget", "webhook_idempotency {\n\tbody_budget off\n}", `{"body_budget":-1}`},
		{"trace url", "webhook_idempotency {\n\ttrace_url https://grafana.example/explore?trace={trace_id}\n}", `{"trace_url":"https://grafana.example/explore?trace={trace_id}"}`},
		{"trace url from the environment", "webhook_idempotency {\n\ttrace_url {env.TRACES}/trace/{trace_id}\n}", `{"trace_url":"{env.TRACES}/trace/{trace_id}"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := parseGlobalOption(caddyfile.NewTestDispenser(tc.input), nil)
			if err != nil {
				t.Fatalf("parse %q: %v", tc.input, err)
			}
			app, ok := v.(httpcaddyfile.App)
			if !ok {
				t.Fatalf("parse %q: got %T, want httpcaddyfile.App", tc.input, v)
			}
			if app.Name != "webhook_idempotency" {
				t.Errorf("app name = %q, want webhook_idempotency", app.Name)
			}
			if normalizeJSON(t, app.Value) != normalizeJSON(t, []byte(tc.want)) {
				t.Errorf("app JSON = %s, want %s", app.Value, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		name, input, want string
	}{
		{"argument on the line", "webhook_idempotency memory", "wrong argument count or unexpected line ending after 'memory', at Testfile:1"},
		{"unknown option", "webhook_idempotency {\n\tttl 1h\n}", "unrecognized global webhook_idempotency option 'ttl', at Testfile:2"},
		{"store missing type", "webhook_idempotency {\n\tstore\n}", "store needs a type: file, memory or redis, at Testfile:2"},
		{"store unknown", "webhook_idempotency {\n\tstore disk\n}", "unknown store 'disk': want file, memory or redis, at Testfile:2"},
		{"store bad option", "webhook_idempotency {\n\tstore memory {\n\t\tmax_entries -1\n\t}\n}", "invalid max_entries '-1': want a positive integer, at Testfile:3"},
		{"body budget not a size", "webhook_idempotency {\n\tbody_budget lots\n}", "invalid body_budget 'lots': strconv.ParseFloat: parsing \"\": invalid syntax (or off), at Testfile:2"},
		{"body budget without a value", "webhook_idempotency {\n\tbody_budget\n}", "body_budget takes exactly one value, got 0, at Testfile:2"},
		{"trace url without the trace id", "webhook_idempotency {\n\ttrace_url https://jaeger.example/trace/\n}", "invalid trace_url 'https://jaeger.example/trace/': want the URL of a trace in the trace viewer, with {trace_id} where its id goes, at Testfile:2"},
		{"trace url not http", "webhook_idempotency {\n\ttrace_url javascript:alert({trace_id})\n}", "invalid trace_url 'javascript:alert({trace_id})': want an absolute http:// or https:// URL with a host, at Testfile:2"},
		{"trace url without a value", "webhook_idempotency {\n\ttrace_url\n}", "trace_url takes exactly one value, got 0, at Testfile:2"},
		{"redis key_prefix with a colon", "webhook_idempotency {\n\tstore redis {\n\t\tkey_prefix idem:a\n\t}\n}", "invalid key_prefix \"idem:a\": it must not contain ':', '{', '}' or white space (keys are <key_prefix>:<source>:<value>; a ':' would let two routes' keys collide), at Testfile:3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseGlobalOption(caddyfile.NewTestDispenser(tc.input), nil)
			if err == nil || err.Error() != tc.want {
				t.Errorf("parse %q:\n got error  %v\n want error %q", tc.input, err, tc.want)
			}
		})
	}
}

// TestAppTraceURL: the global trace_url of a JSON configuration is held to
// the Caddyfile's rule, its placeholders resolved at provision.
func TestAppTraceURL(t *testing.T) {
	t.Setenv("TRACE_VIEWER", "https://tempo.example")
	for _, tc := range []struct{ in, want, err string }{
		{in: "{env.TRACE_VIEWER}/trace/{trace_id}", want: "https://tempo.example/trace/{trace_id}"},
		{in: "https://tempo.example/trace/", err: "invalid trace_url 'https://tempo.example/trace/': want the URL of a trace in the trace viewer, with {trace_id} where its id goes"},
		{in: "{env.NO_SUCH_VIEWER}/{trace_id}", err: "invalid trace_url '/{trace_id}': want an absolute http:// or https:// URL with a host"},
	} {
		ctx, cancel := testkit.NewContext(t)
		a := &App{TraceURL: tc.in}
		err := a.Provision(ctx)
		cancel()
		if tc.err != "" {
			if err == nil || err.Error() != tc.err {
				t.Errorf("%s: error %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || a.traceURL != tc.want {
			t.Errorf("%s: %q %v, want %q", tc.in, a.traceURL, err, tc.want)
		}
	}
}

// adaptCaddyfile adapts a whole Caddyfile to JSON.
func adaptCaddyfile(t *testing.T, input string) ([]byte, error) {
	t.Helper()
	adapter := caddyconfig.GetAdapter("caddyfile")
	if adapter == nil {
		t.Fatal("caddyfile adapter not registered")
	}
	out, _, err := adapter.Adapt([]byte(input), map[string]any{"filename": "Caddyfile"})
	return out, err
}

func TestCaddyfilePresetSourceAcrossRoutes(t *testing.T) {
	for _, tc := range []struct {
		name, input, wantErr string
	}{
		{
			name: "two handle routes share a preset default source",
			input: `:8080 {
	handle /a {
		webhook_idempotency stripe {
			verify off
		}
		respond "a"
	}
	handle /b {
		webhook_idempotency stripe {
			verify off
		}
		respond "b"
	}
}`,
			wantErr: `Caddyfile:9: the "stripe" preset is used without a 'source' here and at Caddyfile:3`,
		},
		{
			name: "two sites share a preset default source",
			input: `:8080 {
	webhook_idempotency github verify off
	respond "a"
}

:8081 {
	webhook_idempotency github verify off
	respond "b"
}`,
			wantErr: `Caddyfile:7: the "github" preset is used without a 'source' here and at Caddyfile:2`,
		},
		{
			name: "path matchers before the preset",
			input: `:8080 {
	webhook_idempotency /hooks/a stripe verify off
	webhook_idempotency /hooks/b stripe {
		verify off
	}
	respond "ok"
}`,
			wantErr: `Caddyfile:3: the "stripe" preset is used without a 'source' here and at Caddyfile:2`,
		},
		{
			name: "one route names its source, the other takes the preset's",
			input: `:8080 {
	handle /a {
		webhook_idempotency stripe source stripe_a verify off
		respond "a"
	}
	handle /b {
		webhook_idempotency stripe verify off
		respond "b"
	}
}`,
		},
		{
			name: "explicit sources on both routes",
			input: `:8080 {
	handle /a {
		webhook_idempotency stripe source stripe verify off
		respond "a"
	}
	handle /b {
		webhook_idempotency stripe source stripe verify off
		respond "b"
	}
}`,
		},
		{
			name: "different presets",
			input: `:8080 {
	handle /a {
		webhook_idempotency stripe verify off
		respond "a"
	}
	handle /b {
		webhook_idempotency github verify off
		respond "b"
	}
}`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := adaptCaddyfile(t, tc.input)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("adapt: unexpected error: %v", err)
				}
				if got := strings.Count(string(out), `"handler":"webhook_idempotency"`); got != 2 {
					t.Errorf("adapted config has %d webhook_idempotency handlers, want 2:\n%s", got, out)
				}
				return
			}
			if err == nil {
				t.Fatalf("adapt: want an error containing %q, got none:\n%s", tc.wantErr, out)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("adapt error:\n got  %q\n want it to contain %q", err.Error(), tc.wantErr)
			}
			if !strings.Contains(err.Error(), "distinct 'source'") {
				t.Errorf("adapt error %q does not ask for a distinct source", err.Error())
			}
		})
	}
}
