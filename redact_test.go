//go:build porting

package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRedactorShows: a route's redactor replaces the values of the
// credential headers (named, the route's token header, or with a name
// that looks like a credential's) and of the secret-looking query
// parameters; signature headers and the route's key sources are kept.
func TestRedactorShows(t *testing.T) {
	keys, err := parseKeySources([]string{"header:I-Twilio-Idempotency-Token", "query:session_id", "body"})
	if err != nil {
		t.Fatal(err)
	}
	h := &Handler{Verify: &VerifyConfig{Scheme: "token", Header: "x-hook-auth"}, keys: keys}
	rd, err := h.redactor(nil)
	if err != nil {
		t.Fatal(err)
	}
	header := http.Header{
		"Authorization":              {"Bearer s1"},
		"Proxy-Authorization":        {"Basic s2"},
		"Cookie":                     {"session=s3", "b=s4"},
		"X-Api-Key":                  {"s5"},
		"X-Gitlab-Token":             {"s6"},
		"Asaas-Access-Token":         {"s7"},
		"X-Hook-Auth":                {"s8"}, // the route's verify token header
		"Content-Type":               {"application/json"},
		"X-Github-Delivery":          {"d1"},
		"Idempotency-Key":            {"k1"},
		"X-Hub-Signature-256":        {"sha256=ab"},
		"I-Twilio-Idempotency-Token": {"k2"}, // the route's key
	}
	uri := rd.uri("/in?api_key=s9&x=1&Token=s10&a%2Ekey=s11&hub.verify_token=s12&data.id=7&password&id=2&sig=s13&session_id=k3#frag")
	if want := "/in?api_key=[redacted]&x=1&Token=[redacted]&a%2Ekey=s11&hub.verify_token=[redacted]&data.id=7&password&id=2&sig=[redacted]&session_id=k3#frag"; uri != want {
		t.Errorf("uri:\n%s\nwant\n%s", uri, want)
	}
	got := rd.header(header)
	kept := map[string]bool{"Content-Type": true, "X-Github-Delivery": true, "Idempotency-Key": true, "X-Hub-Signature-256": true, "I-Twilio-Idempotency-Token": true}
	for name, values := range got {
		for i, v := range values {
			if !kept[name] && v != redactedValue {
				t.Errorf("%s: %q not redacted", name, v)
			}
			if kept[name] && v != header[name][i] {
				t.Errorf("%s: %q changed to %q", name, header[name][i], v)
			}
		}
	}
	if len(got["Cookie"]) != 2 || header.Get("Authorization") != "Bearer s1" {
		t.Errorf("values counted wrong, or the original modified: %v / %v", got, header)
	}
	if uri := rd.uri("/plain"); uri != "/plain" {
		t.Errorf("nothing to redact: %q", uri)
	}
	var nilRedactor *redactor
	if uri := nilRedactor.uri("/in?token=t"); uri != "/in?token=t" {
		t.Errorf("a nil redactor redacts %q", uri)
	}
}

// TestRedactorHeaderAllocs: deciding whether a header is redacted, which
// the archive does for every header of every delivery, does not allocate.
func TestRedactorHeaderAllocs(t *testing.T) {
	rd, err := newRedactor([]string{"header:X-Card"}, secretHeaders...)
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"Content-Type", "X-Hub-Signature-256", "X-Api-Key", "User-Agent", "X-Github-Delivery"}
	if n := testing.AllocsPerRun(100, func() {
		for _, name := range names {
			rd.redactsHeader(name)
		}
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// TestRedactorBody: every occurrence of a redacted JSON path is replaced,
// nested values, array wildcards, object wildcards, escapes and repeated
// keys included; everything else is kept byte for byte.
func TestRedactorBody(t *testing.T) {
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
		{"not JSON", []string{"json:a"}, `a=1&card=4242`, `a=1&card=4242`},
		{"top-level array", []string{"json:#.secret"}, `[{"secret":"s1"},{"secret":"s2"}]`, `[{"secret":"[redacted]"},{"secret":"[redacted]"}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rd, err := newRedactor(tc.rules)
			if err != nil {
				t.Fatal(err)
			}
			in := []byte(tc.in)
			out, changed, ok := rd.body(in)
			if !ok {
				t.Fatalf("body(%s) not ok", tc.in)
			}
			if string(out) != tc.want {
				t.Fatalf("body(%s)\n got %s\nwant %s", tc.in, out, tc.want)
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

// TestRedactorHeaders: configured and always-redacted headers have every
// value replaced, in any case; other headers are copied untouched.
func TestRedactorHeaders(t *testing.T) {
	rd, err := newRedactor([]string{"header:x-card"}, secretHeaders...)
	if err != nil {
		t.Fatal(err)
	}
	h := http.Header{
		"X-Card":         {"4242", "1111"},
		"Authorization":  {"Bearer secret"},
		"X-Gitlab-Token": {"tok"},
		"Content-Type":   {"application/json"},
	}
	got := rd.header(h)
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
		if !rd.redactsHeader(name) {
			t.Errorf("%s is not redacted", name)
		}
	}
	block := headerBlock(h, skipArchiveHeader, rd)
	if strings.Contains(block, "4242") || strings.Contains(block, "secret") || strings.Contains(block, "tok\r") {
		t.Fatalf("header block holds a redacted value: %q", block)
	}
	var nilRedactor *redactor
	if nilRedactor.redactsHeader("Authorization") || nilRedactor.hasPaths() {
		t.Fatal("a nil redactor redacts")
	}
}

// TestParseRedactRule: the accepted forms and the errors.
func TestParseRedactRule(t *testing.T) {
	for _, ok := range []string{"header:X-Card", "json:a", "json:a.b.0.c", "json:a.#.b", "json:*.b", `json:a\.b`, `json:a\#`} {
		if _, _, err := parseRedactRule(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "header:", "json:", "cookie:x", "header:bad name", "json:a..b", "json:a.", "json:a#", "json:a.b|c", "json:@this", `json:a\`, "json:a.#(b==1)"} {
		if _, _, err := parseRedactRule(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// The admin API never shows a secret that a stored event carries (the URI's
// secret query parameters, secret headers, the route's verify token), while
// the inbox still delivers the request whole.
func TestAdminDeadLettersAreRedacted(t *testing.T) {
	const source = "admin_redact"
	srv := startRedis(t)
	app := refusingApp(t)
	port := freePort(t)
	c := startCaddy(t, "", fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		verify token {
			header X-Hook-Auth
			secret tokensecret-1
		}
		store redis redis://%s
		inbox {
			deliver_to %s/hook
			retries 1m
			timeout 1s
		}
	}
}`, port, source, srv.addr(), app.URL))

	secrets := []string{"tokensecret-1", "querysecret-2", "querysecret-3", "bearersecret-4", "cookiesecret-5", "apikeysecret-6"}
	resp, b := post(t, siteURL(port)+"/in?api_key=querysecret-2&id=7&access_token=querysecret-3", []byte(`{"id":"evt_r"}`),
		"X-Hook-Auth", "tokensecret-1", "Authorization", "Bearer bearersecret-4",
		"Cookie", "sid=cookiesecret-5", "X-Api-Key", "apikeysecret-6", "Content-Type", "application/json")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %s: %s", resp.Status, b)
	}
	var raw []byte
	adminWait(t, 10*time.Second, "the event to be dead-lettered", func() bool {
		_, raw = adminCall(t, c, http.MethodGet, "/webhook_idempotency/"+source+"/dead")
		return strings.HasPrefix(strings.TrimSpace(string(raw)), `[{`)
	})
	for _, s := range secrets {
		if strings.Contains(string(raw), s) {
			t.Errorf("the admin API shows the secret %q: %s", s, raw)
		}
	}
	var dead []struct {
		URI     string      `json:"uri"`
		Headers http.Header `json:"headers"`
	}
	if err := json.Unmarshal(raw, &dead); err != nil || len(dead) != 1 {
		t.Fatalf("dead list %s: %v", raw, err)
	}
	if want := "/in?api_key=[redacted]&id=7&access_token=[redacted]"; dead[0].URI != want {
		t.Errorf("uri %q, want %q", dead[0].URI, want)
	}
	for _, name := range []string{"X-Hook-Auth", "Authorization", "Cookie", "X-Api-Key"} {
		if got := dead[0].Headers.Get(name); got != redactedValue {
			t.Errorf("header %s shown as %q", name, got)
		}
	}
	if got := dead[0].Headers.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type shown as %q", got)
	}
	// what is stored is what was delivered: the application got it whole
	got := app.requests()[0]
	if got.Header.Get("Authorization") != "Bearer bearersecret-4" || got.Header.Get("X-Hook-Auth") != "tokensecret-1" {
		t.Errorf("the delivery lost its headers: %v", got.Header)
	}
}
