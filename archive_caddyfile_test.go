package webhookidempotency

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestArchiveCaddyfile: the inline shorthand, the block, and the errors,
// each naming its token and line.
func TestArchiveCaddyfile(t *testing.T) {
	h, err := parseTestHandler(`webhook_idempotency stripe archive 30d {
		secret s
	}`)
	if err != nil || h.Archive == nil || h.Archive.Retention != dur(30*24*time.Hour) {
		t.Fatalf("inline: %+v %v", h.Archive, err)
	}
	h, err = parseTestHandler(`webhook_idempotency {
		source s
		archive 7d {
			max_events 500
			bodies off
			redact header:X-Card json:card.number
			redact json:items.#.pan
			redeliver_to http://app:3000/replay
		}
	}`)
	if err != nil {
		t.Fatal(err)
	}
	a := h.Archive
	if a.Retention != dur(7*24*time.Hour) || a.MaxEvents != 500 || a.Bodies != "off" ||
		strings.Join(a.Redact, " ") != "header:X-Card json:card.number json:items.#.pan" || a.RedeliverTo != "http://app:3000/replay" {
		t.Fatalf("block: %+v", a)
	}
	if h, err := parseTestHandler("webhook_idempotency {\n\tsource s\n\tarchive\n}"); err != nil || h.Archive == nil || h.Archive.Retention != 0 {
		t.Fatalf("bare archive: %+v %v", h.Archive, err)
	}

	for input, want := range map[string]string{
		"webhook_idempotency {\n\tsource s\n\tarchive 0s\n}":                               "invalid archive retention '0s'",
		"webhook_idempotency {\n\tsource s\n\tarchive 1d 2d\n}":                            "extra argument '2d'",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tmax_events -1\n\t}\n}":        "invalid archive max_events '-1'",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tbodies maybe\n\t}\n}":         "invalid archive bodies 'maybe'",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tredact card\n\t}\n}":          "invalid redact 'card'",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tredact json:a|b\n\t}\n}":      "gjson query syntax",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tredact\n\t}\n}":               "needs at least one value",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tredeliver_to ftp://x\n\t}\n}": "invalid archive redeliver_to",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tkeep forever\n\t}\n}":         "unrecognized archive subdirective 'keep'",
		"webhook_idempotency {\n\tsource s\n\tarchive {\n\t\tretention\n\t}\n}":            "exactly one value",
		"webhook_idempotency {\n\tsource s\n\tarchive\n\tarchive 1d\n}":                    "archive given twice",
		"webhook_idempotency source s archive":                                             "needs a value",
	} {
		_, err := parseTestHandler(input)
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "Testfile:") {
			t.Errorf("%q: got %v, want an error with %q and its line", input, err, want)
		}
	}
}

// TestArchiveProvisionRules: JSON configs get the parser's rules at
// provision, and a key taken from a redacted value is refused.
func TestArchiveProvisionRules(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"source":"p","archive":{"bodies":"maybe"}}`:                                   "invalid archive bodies",
		`{"source":"p","archive":{"redact":["nope"]}}`:                                  "invalid redact",
		`{"source":"p","archive":{"redeliver_to":"not a url"}}`:                         "invalid archive redeliver_to",
		`{"source":"p","archive":{"max_events":-5}}`:                                    "max_events",
		`{"source":"p","key":["header:X-Card"],"archive":{"redact":["header:x-card"]}}`: "redacts header X-Card, which is a key source",
		`{"source":"p","key":["json:data.id"],"archive":{"redact":["json:data.*"]}}`:    "redacts the JSON value of key source json:data.id",
		`{"source":"p","key":["header:Authorization"],"archive":{}}`:                    "redacts header Authorization",
	} {
		h := new(Handler)
		if err := json.Unmarshal([]byte(cfg), h); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := testkit.NewContext(t)
		err := h.Provision(ctx)
		_ = h.Cleanup()
		cancel()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", cfg, err, want)
		}
	}
}
