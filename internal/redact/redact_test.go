package redact_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/redact"
)

// TestRedactorHeaderAllocs: deciding whether a header is redacted, which
// the archive does for every header of every delivery, does not allocate.
func TestRedactorHeaderAllocs(t *testing.T) {
	rd, err := redact.New([]string{"header:X-Card"}, redact.SecretHeaders...)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"Content-Type", "X-Hub-Signature-256", "X-Api-Key", "User-Agent", "X-Github-Delivery"}
	if n := testing.AllocsPerRun(100, func() {
		for _, name := range names {
			rd.RedactsHeader(name)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestRedactorBody: every occurrence of a redacted JSON path is replaced,
// nested values, array wildcards, object wildcards, escapes and repeated
// keys included; everything else is kept byte for byte.
func TestRedactorBody(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		rules []string
		in    string
		want  string
	}{
		{"top level", []string{"json:card"}, `{"id":"evt_1","card":"4242"}`, `{"id":"evt_1","card":"[redacted]"}`},
		{"nested object value", []string{"json:data.card"}, `{"data":{"card":{"number":"4242","exp":"12/30"}},"id":1}`, `{"data":{"card":"[redacted]"},"id":1}`},
		{"array index", []string{"json:items.1.pan"}, `{"items":[{"pan":"1"},{"pan":"2"}]}`, `{"items":[{"pan":"1"},{"pan":"[redacted]"}]}`},
		{"every element", []string{"json:items.#.pan"}, `{"items":[{"pan":"1"},{"x":0},{"pan":2}]}`, `{"items":[{"pan":"[redacted]"},{"x":0},{"pan":"[redacted]"}]}`},
		{"every member", []string{"json:cards.*.cvv"}, `{"cards":{"a":{"cvv":"123"},"b":{"cvv":"456"}}}`, `{"cards":{"a":{"cvv":"[redacted]"},"b":{"cvv":"[redacted]"}}}`},
		{"repeated key", []string{"json:card"}, `{"card":"1111","card":"2222"}`, `{"card":"[redacted]","card":"[redacted]"}`},
		{"escaped key", []string{"json:a\\.b"}, `{"a.b":"secret","a":{"b":"kept"}}`, `{"a.b":"[redacted]","a":{"b":"kept"}}`},
		{"key written with escapes", []string{"json:card"}, `{"c\u0061rd":"4242"}`, `{"c\u0061rd":"[redacted]"}`},
		{"white space kept", []string{"json:b"}, " \n{ \"a\" : 1 , \"b\" : [ 1, 2 ] }\n", " \n{ \"a\" : 1 , \"b\" : \"[redacted]\" }\n"},
		{"two paths, one inside the other", []string{"json:a", "json:a.b"}, `{"a":{"b":"x"},"c":1}`, `{"a":"[redacted]","c":1}`},
		{"absent path", []string{"json:nope"}, `{"a":1}`, `{"a":1}`},
		{"empty", []string{"json:a"}, ``, ``},
		{"top-level array", []string{"json:#.secret"}, `[{"secret":"s1"},{"secret":"s2"}]`, `[{"secret":"[redacted]"},{"secret":"[redacted]"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, err := redact.New(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			in := []byte(tc.in)
			out, changed, err := rd.Body(in)
			if err != nil {
				t.Fatalf("Body(%s): %v", tc.in, err)
			}
			if string(out) != tc.want {
				t.Fatalf("Body(%s)\n got %s\nwant %s", tc.in, out, tc.want)
			}
			if changed != (tc.in != tc.want) {
				t.Fatalf("changed = %v", changed)
			}
			if string(in) != tc.in {
				t.Fatalf("the input was modified: %s", in)
			}
		})
	}
}

// TestRedactorBodyNotStrict: with JSON paths, a body that is not strict
// JSON is refused whole, whatever a lenient parser would read in it (a
// byte order mark, trailing data, NaN, comments, single quotes, a form); a
// redactor of headers alone keeps such a body.
func TestRedactorBodyNotStrict(t *testing.T) {
	t.Parallel()
	rd, err := redact.New([]string{"json:card.number"})
	if err != nil {
		t.Fatal(err)
	}
	headersOnly, err := redact.New([]string{"header:X-Card"})
	if err != nil {
		t.Fatal(err)
	}
	const card = `{"card":{"number":"4111111111111111"}}`
	for name, body := range map[string]string{
		"byte order mark": "\ufeff" + card,
		"trailing data":   card + ` {"x":1}`,
		"trailing text":   card + `garbage`,
		"NaN":             `{"amount":NaN,"card":{"number":"4111111111111111"}}`,
		"line comment":    "// note\n" + card,
		"block comment":   `{/* c */"card":{"number":"4111111111111111"}}`,
		"single quotes":   `{'card':{'number':'4111111111111111'}}`,
		"trailing comma":  `{"card":{"number":"4111111111111111",}}`,
		"form":            `card[number]=4111111111111111`,
	} {
		out, changed, err := rd.Body([]byte(body))
		if !errors.Is(err, redact.ErrNotStrictJSON) || out != nil || changed {
			t.Errorf("%s: Body = %q, %v, %v; want nothing and ErrNotStrictJSON", name, out, changed, err)
		}
		if out, changed, err := headersOnly.Body([]byte(body)); err != nil || changed || string(out) != body {
			t.Errorf("%s, no JSON path: Body = %q, %v, %v; want it whole", name, out, changed, err)
		}
	}
}

// TestCredentialNames: headers and query parameters named like a
// credential are redacted; others, signatures among them, are kept.
func TestCredentialNames(t *testing.T) {
	t.Parallel()
	rd, err := redact.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"X-Auth-Key", "X-Auth", "X-Webhook-Key", "X-Signing-Key", "X-Jwt", "X-Bearer", "Jwt", "Bearer",
		"X-Api-Key", "X-Auth-Token", "X-Webhook-Secret", "Auth", "Key", "X-Key", "Pass", "X-Pass", "Otp", "X-Otp",
		"Auth-Key", "X-Client-Secret", "X-Access-Token", "Aeg-Sas-Key", "Aeg-Sas-Token",
	} {
		if !rd.RedactsHeader(name) {
			t.Errorf("header %s is kept", name)
		}
	}
	for _, name := range []string{
		"Content-Type", "User-Agent", "X-Hub-Signature-256", "Stripe-Signature", "X-Github-Delivery",
		"X-Request-Id", "Idempotency-Key", "X-Shopify-Hmac-Sha256", "X-Passenger", "X-Forwarded-For", "X-Keyword",
	} {
		if rd.RedactsHeader(name) {
			t.Errorf("header %s is redacted", name)
		}
	}
	for _, q := range []string{"jwt", "bearer", "pass", "auth_key", "otp", "authKey", "x-auth", "api_key", "token", "sig", "signature", "code", "aeg-sas-key", "aeg-sas-token"} {
		uri := "/hook?a=1&" + q + "=s3cr3t"
		if got := rd.URI(uri); got != "/hook?a=1&"+q+"=[redacted]" {
			t.Errorf("query %s: %s", q, got)
		}
	}
	for _, q := range []string{"id", "topic", "passage", "keyword", "event"} {
		uri := "/hook?" + q + "=v"
		if got := rd.URI(uri); got != uri {
			t.Errorf("query %s redacted: %s", q, got)
		}
	}
}

// TestRedactorHeaders: configured and always-redacted headers have every
// value replaced, in any case; other headers are copied untouched.
func TestRedactorHeaders(t *testing.T) {
	t.Parallel()
	rd, err := redact.New([]string{"header:x-card"}, redact.SecretHeaders...)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{
		"X-Card":         {"4242", "1111"},
		"Authorization":  {"Bearer secret"},
		"X-Gitlab-Token": {"tok"},
		"Content-Type":   {"application/json"},
	}
	got := rd.Header(h)
	want := http.Header{
		"X-Card":         {"[redacted]", "[redacted]"},
		"Authorization":  {"[redacted]"},
		"X-Gitlab-Token": {"[redacted]"},
		"Content-Type":   {"application/json"},
	}
	for name, values := range want {
		if strings.Join(got[name], "|") != strings.Join(values, "|") {
			t.Errorf("%s: got %q, want %q", name, got[name], values)
		}
	}
	if h.Get("X-Card") != "4242" {
		t.Fatal("the input was modified")
	}
	for _, name := range []string{"x-card", "X-CARD", "asaas-access-token", "cookie"} {
		if !rd.RedactsHeader(name) {
			t.Errorf("%s is not redacted", name)
		}
	}
	block := event.HeaderBlock(h, event.SkipArchiveHeader, rd.RedactsHeader)
	if strings.Contains(block, "4242") || strings.Contains(block, "secret") || strings.Contains(block, "tok\r") {
		t.Fatalf("header block holds a redacted value: %q", block)
	}
	var nilRedactor *redact.Redactor
	if nilRedactor.RedactsHeader("Authorization") || nilRedactor.HasPaths() {
		t.Fatal("a nil redactor redacts")
	}
}

// TestParseRedactRule: the accepted forms and the errors.
func TestParseRedactRule(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"header:X-Card", "json:a", "json:a.b.0.c", "json:a.#.b", "json:*.b", `json:a\.b`, `json:a\#`} {
		if _, _, err := redact.ParseRule(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "header:", "json:", "cookie:x", "header:bad name", "json:a..b", "json:a.", "json:a#", "json:a.b|c", "json:@this", `json:a\`, "json:a.#(b==1)"} {
		if _, _, err := redact.ParseRule(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
