package webhookidempotency

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The delivery policy's configuration (docs/inbox.md#delivery-policy):
// what the Caddyfile gives, what it refuses and why, and what it resolves
// to.

func TestCaddyfileInboxPolicyParse(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		input string
		want  InboxConfig
	}{
		{
			name:  "respond app with the preset's deadline",
			input: "webhook_idempotency source s {\n\tinbox http://a/h {\n\t\trespond app\n\t}\n}",
			want:  InboxConfig{DeliverTo: "http://a/h", RespondApp: true},
		},
		{
			name:  "respond app within, and the status it falls back to",
			input: "webhook_idempotency source s {\n\tinbox http://a/h {\n\t\trespond 200\n\t\trespond app within 2s\n\t}\n}",
			want:  InboxConfig{DeliverTo: "http://a/h", Respond: 200, RespondApp: true, RespondAppWithin: dur(2 * time.Second)},
		},
		{
			name: "routes, with and without a block, and drops",
			input: `webhook_idempotency source s {
				inbox http://app/h {
					route header:X-Shopify-Topic=orders/* http://orders/h {
						retries 1s 5s
						rate 10/s
						order_by json:id
						tls {
							server_name orders.internal
						}
					}
					route header:X-Shopify-Topic=orders/* http://audit/h
					drop header:X-Shopify-Topic=app/uninstalled
					drop json:test=true
				}
			}`,
			want: InboxConfig{DeliverTo: "http://app/h",
				Routes: []InboxRouteConfig{
					{Match: "header:X-Shopify-Topic=orders/*", To: "http://orders/h", Retries: []caddy.Duration{dur(time.Second), dur(5 * time.Second)},
						Rate: "10/s", OrderBy: []string{"json:id"}, TLS: &InboxTLSConfig{ServerName: "orders.internal"}},
					{Match: "header:X-Shopify-Topic=orders/*", To: "http://audit/h"},
				},
				Drop: []string{"header:X-Shopify-Topic=app/uninstalled", "json:test=true"},
			},
		},
		{
			name:  "breaker with its cooldown, newer_than",
			input: "webhook_idempotency source s {\n\tinbox http://a/h {\n\t\torder_by json:id\n\t\tbreaker 50% of 20 cooldown 1m\n\t\tnewer_than json:updated_at\n\t}\n}",
			want: InboxConfig{DeliverTo: "http://a/h", OrderBy: []string{"json:id"},
				Breaker: &InboxBreakerConfig{Percent: 50, Of: 20, Cooldown: dur(time.Minute)}, NewerThan: "json:updated_at"},
		},
		{
			name:  "breaker without a cooldown",
			input: "webhook_idempotency source s {\n\tinbox http://a/h {\n\t\tbreaker 100% of 1\n\t}\n}",
			want:  InboxConfig{DeliverTo: "http://a/h", Breaker: &InboxBreakerConfig{Percent: 100, Of: 1}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			wantParsed(t, tc.input, &Handler{Source: "s", Inbox: &tc.want})
		})
	}
}

func TestCaddyfileInboxPolicyParseErrors(t *testing.T) {
	t.Parallel()
	block := func(lines ...string) string {
		return "webhook_idempotency source s {\n\tinbox http://a/h {\n" + strings.Join(lines, "\n") + "\n\t}\n}"
	}
	for _, tc := range []struct {
		name  string
		input string
		want  string
	}{
		{"respond app extra", block("\t\trespond app soon"), "inbox 'respond app' takes 'within <duration>' or nothing (the preset's default), got 'soon', at Testfile:3"},
		{"respond app within nothing", block("\t\trespond app within"), "inbox 'respond app' takes 'within <duration>' or nothing (the preset's default), got 'within', at Testfile:3"},
		{"respond app within 0", block("\t\trespond app within 0s"), "invalid inbox respond app within '0s': must be positive, at Testfile:3"},
		{"route without a URL", block("\t\troute json:type=a"), "inbox 'route' takes a rule and a URL, `route <key source>=<glob> <url>`, got 1 values, at Testfile:3"},
		{"route without =", block("\t\troute json:type http://b/h"), "invalid inbox route rule 'json:type': want <key source>=<glob>, such as json:type=invoice.*, at Testfile:3"},
		{"route on the body", block("\t\troute body=x http://b/h"), "invalid inbox route rule 'body=x': the body is no value to match; want header:<name>, json:<path> or query:<name>, at Testfile:3"},
		{"route on a bad source", block("\t\troute cookie:a=x http://b/h"), `invalid inbox route rule 'cookie:a=x': invalid key source "cookie:a": unknown kind "cookie" (want header, json, query or body), at Testfile:3`},
		{"route to ftp", block("\t\troute json:type=a ftp://b/h"), "invalid inbox route 'ftp://b/h': want an absolute http:// or https:// URL with a host, at Testfile:3"},
		{"route unknown option", block("\t\troute json:type=a http://b/h {", "\t\t\tjitter 5%", "\t\t}"), "unrecognized inbox route subdirective 'jitter' (want retries, rate, order_by or tls), at Testfile:4"},
		{"route bad rate", block("\t\troute json:type=a http://b/h {", "\t\t\trate fast", "\t\t}"), "invalid inbox rate 'fast': want <n>/<s|m|h> with n from 1 to 1000000, such as 10/s, at Testfile:4"},
		{"route options twice", block("\t\troute json:type=a http://b/h {", "\t\t\trate 1/s", "\t\t}", "\t\troute json:type=b http://b/h {", "\t\t\trate 2/s", "\t\t}"),
			"inbox route to http://b/h has options, and an earlier route to it sets them: give a destination's options once, on its first route, at Testfile:7"},
		{"route to deliver_to with options", block("\t\troute json:type=a http://a/h {", "\t\t\trate 1/s", "\t\t}"),
			"inbox route to http://a/h (deliver_to) takes no options: deliver_to's are the inbox's, at Testfile:4"},
		{"drop without glob", block("\t\tdrop json:type="), "invalid inbox drop rule 'json:type=': want <key source>=<glob>, such as json:type=invoice.*, at Testfile:3"},
		{"breaker without of", block("\t\tbreaker 50% 20"), "invalid inbox breaker '50% 20': want <p>% of <n> [cooldown <duration>], such as 50% of 20, at Testfile:3"},
		{"breaker 0%", block("\t\tbreaker 0% of 20"), "invalid inbox breaker 0%: want 1% to 100%, at Testfile:3"},
		{"breaker of 5000", block("\t\tbreaker 10% of 5000"), "invalid inbox breaker 'of 5000': want 1 to 1000 attempts, at Testfile:3"},
		{"breaker cooldown an hour", block("\t\tbreaker 10% of 50 cooldown 1h"), "invalid inbox breaker cooldown 1h0m0s: want a positive duration up to 10m0s, at Testfile:3"},
		{"breaker twice", block("\t\tbreaker 10% of 50", "\t\tbreaker 20% of 50"), "inbox breaker given twice, at Testfile:4"},
		{"newer_than body", block("\t\tnewer_than body"), "invalid inbox newer_than 'body': want header:<name>, json:<path> or query:<name>, a value that grows with each event, such as json:updated_at, at Testfile:3"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}

func TestInboxPolicyProvisionErrors(t *testing.T) {
	store := redisStoreJSON(testkit.StartRedis(t).Addr())
	for _, tc := range []struct {
		name, handler, inbox, want string
	}{
		{"newer_than without order_by", `"source":"s"`, `"newer_than":"json:v"`,
			"inbox newer_than compares an event with the largest value its order_by group has delivered: give order_by"},
		{"respond app without a preset", `"source":"s"`, `"respond_app":true`,
			"inbox 'respond app' needs 'within <duration>': the route has no preset, whose provider's timeout would set it"},
		{"respond app, a preset with no timeout", `"provider":"stripe","verify":{"secrets":["whsec_x"]}`, `"respond_app":true`,
			"inbox 'respond app' needs 'within <duration>': the stripe preset's provider documents no timeout (docs/providers.md)"},
		{"respond app within longer than timeout", `"source":"s"`, `"respond_app_within":5000000000,"timeout":2000000000`,
			"inbox respond app within 5s is longer than the inbox timeout 2s: an attempt ends at its timeout; raise timeout or shorten within"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `{` + tc.handler + `,"store":` + store + `,"inbox":{"deliver_to":"http://127.0.0.1:9/h",` + tc.inbox + `}}`
			_, err := provisionInboxHandler(t, cfg)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("provision %s:\n got error  %v\n want error %q", cfg, err, tc.want)
			}
		})
	}
}

// A preset's respond app deadline is its provider's documented timeout
// less a fifth, at least a second, and the inbox's timeout gives an
// attempt that long.
func TestInboxRespondAppPresetDefaults(t *testing.T) {
	want := map[string]time.Duration{
		"github": 8 * time.Second, "slack": 2 * time.Second, "shopify": 4 * time.Second, "svix": 12 * time.Second,
		"square": 8 * time.Second, "zoom": 2 * time.Second, "discord": 2 * time.Second, "paddle": 4 * time.Second,
		"mercadopago": 17 * time.Second, "ifood": 4 * time.Second, "gitlab": 8 * time.Second, "evolution": 24 * time.Second,
		"efi": 48 * time.Second, "clerk": 12 * time.Second, "resend": 12 * time.Second, "woovi": 80 * time.Second,
	}
	for _, p := range providers.All() {
		if got := defaultAnswerWithin(p); got != want[p.Name] {
			t.Errorf("%s: respond app within defaults to %s, want %s (its provider's timeout %s)", p.Name, got, want[p.Name], p.Timeout)
		}
	}
	store := redisStoreJSON(testkit.StartRedis(t).Addr())
	h, err := provisionInboxHandler(t, `{"provider":"evolution","verify":{"secrets":["k"]},"store":`+store+`,"inbox":{"deliver_to":"http://127.0.0.1:9/h","respond_app":true}}`)
	if err != nil {
		t.Fatal(err)
	}
	if ic := provisionedInboxConfig(t, h); ic.AnswerWithin != 24*time.Second || ic.Timeout != 24*time.Second || h.answerWithin != 24*time.Second {
		t.Fatalf("evolution's respond app: within %s, timeout %s; want 24s, and a timeout that long", ic.AnswerWithin, ic.Timeout)
	}
}

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"orders/*", "orders/updated", true},
		{"orders/*", "orders/", true},
		{"orders/*", "order/updated", false},
		{"*", "a/b.c", true},
		{"invoice.*", "invoice.paid", true},
		{"invoice.*", "invoiceXpaid", false},
		{"*.paid", "invoice.payment.paid", true},
		{"?.paid", "a.paid", true},
		{"?.paid", "ab.paid", false},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{`price\*`, "price*", true},
		{`price\*`, "prices", false},
		{`a\?`, "a?", true},
		{`a\?`, "ab", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"", "", true},
		{"*a", strings.Repeat("b", 10000), false},
	} {
		if got := globMatch(c.pattern, c.s); got != c.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// A rule reads the event as the inbox stores it; an event without the
// value matches no glob, not even `*`.
func TestRuleMatcher(t *testing.T) {
	t.Parallel()
	ev := &event.Request{Headers: "X-Shopify-Topic: orders/updated\r\n", Body: []byte(`{"type":"invoice.paid","n":3,"test":true}`), URI: "/h?kind=a"}
	for rule, want := range map[string]bool{
		"header:X-Shopify-Topic=orders/*": true,
		"header:x-shopify-topic=orders/*": true,
		"json:type=invoice.*":             true,
		"json:n=3":                        true,
		"json:test=true":                  true,
		"query:kind=a":                    true,
		"json:missing=*":                  false,
		"header:X-Other=*":                false,
		"json:type=charge.*":              false,
	} {
		ks, glob, err := parseRule("route", rule)
		if err != nil {
			t.Fatalf("%s: %v", rule, err)
		}
		if got := ruleMatcher(ks, glob)(ev); got != want {
			t.Errorf("%s matches: %v, want %v", rule, got, want)
		}
	}
}

// docs/providers.md's Timeouts table is the presets' Timeout and the
// respond app default the inbox takes from it: a row for each preset with
// a documented timeout (a row may name several), none for the others.
func TestProvidersDocsTimeouts(t *testing.T) {
	doc := testkit.ReadFile(t, "docs/providers.md")
	start := strings.Index(doc, "### Timeouts\n")
	if start < 0 {
		t.Fatal("docs/providers.md has no Timeouts section")
	}
	section := doc[start:]
	section = section[:strings.Index(section[len("### Timeouts\n"):], "\n### ")+len("### Timeouts\n")]
	rows := map[string][2]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 4 || !strings.HasPrefix(strings.TrimSpace(cells[0]), "`") {
			continue
		}
		for _, name := range strings.Split(strings.TrimSpace(cells[0]), ", ") {
			rows[strings.Trim(name, "`")] = [2]string{strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])}
		}
	}
	seconds := func(d time.Duration) string { return fmt.Sprintf("%d s", int(d.Seconds())) }
	for _, p := range providers.All() {
		row, ok := rows[p.Name]
		switch {
		case p.Timeout == 0 && ok:
			t.Errorf("%s: a row in Timeouts, but the preset has no Timeout", p.Name)
		case p.Timeout == 0:
		case !ok:
			t.Errorf("%s: its timeout %s has no row in docs/providers.md's Timeouts", p.Name, p.Timeout)
		case row[0] != seconds(p.Timeout) || row[1] != seconds(defaultAnswerWithin(p)):
			t.Errorf("%s: Timeouts says %s, default %s; the preset has %s, default %s", p.Name, row[0], row[1], seconds(p.Timeout), seconds(defaultAnswerWithin(p)))
		}
		delete(rows, p.Name)
	}
	for name := range rows {
		t.Errorf("Timeouts has a row for %s, which is no preset", name)
	}
}
