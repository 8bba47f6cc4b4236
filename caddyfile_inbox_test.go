package webhookidempotency

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store/filestore"
	"github.com/webhookguard/caddy-webhook-idempotency/store/redisstore"
)

func TestCaddyfileInboxParse(t *testing.T) {
	t.Parallel()
	redisStore := json.RawMessage(`{"module":"redis","url":"redis://localhost:6379"}`)
	durs := func(ds ...time.Duration) []caddy.Duration {
		out := make([]caddy.Duration, len(ds))
		for i, d := range ds {
			out[i] = dur(d)
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		input string
		want  Handler
	}{
		{
			name:  "shorthand: the URL on the inbox line",
			input: "webhook_idempotency source orders {\n\tinbox http://app:3000/hooks\n}",
			want:  Handler{Source: "orders", Inbox: &InboxConfig{DeliverTo: "http://app:3000/hooks"}},
		},
		{
			name:  "shorthand with a block of other options",
			input: "webhook_idempotency source orders {\n\tinbox https://app.internal/hooks {\n\t\ttimeout 2s\n\t\tjitter 0%\n\t}\n}",
			want:  Handler{Source: "orders", Inbox: &InboxConfig{DeliverTo: "https://app.internal/hooks", Timeout: dur(2 * time.Second), Jitter: "0%"}},
		},
		{
			name:  "shorthand after an inline redis store",
			input: "webhook_idempotency source orders store redis {\n\tinbox http://app:3000/hooks\n}",
			want:  Handler{Source: "orders", StoreRaw: json.RawMessage(`{"module":"redis"}`), Inbox: &InboxConfig{DeliverTo: "http://app:3000/hooks"}},
		},
		{
			name: "the example of docs/inbox.md",
			input: `webhook_idempotency stripe {
				secret {env.STRIPE_WEBHOOK_SECRET}
				store redis redis://localhost:6379
				inbox {
					deliver_to  http://app:3000/webhooks/stripe
					respond     202
					retries     30s 1m 5m 30m 2h 12h
					jitter      10%
					timeout     10s
					concurrency 4
				}
			}`,
			want: Handler{
				Provider: "stripe",
				Verify:   &providers.VerifyConfig{Secrets: []string{"{env.STRIPE_WEBHOOK_SECRET}"}},
				StoreRaw: redisStore,
				Inbox: &InboxConfig{
					DeliverTo: "http://app:3000/webhooks/stripe",
					Respond:   202,
					Retries: durs(30*time.Second, time.Minute, 5*time.Minute, 30*time.Minute,
						2*time.Hour, 12*time.Hour),
					Jitter:      "10%",
					Timeout:     dur(10 * time.Second),
					Concurrency: 4,
				},
			},
		},
		{
			name: "inbox before the store, other options after",
			input: `webhook_idempotency source shop {
				inbox {
					deliver_to https://app.internal:8443/hooks/shop?tenant=eu
					respond 200
				}
				store redis redis://localhost:6379
				ttl 48h
			}`,
			want: Handler{
				Source: "shop", TTL: dur(48 * time.Hour), StoreRaw: redisStore,
				Inbox: &InboxConfig{DeliverTo: "https://app.internal:8443/hooks/shop?tenant=eu", Respond: 200},
			},
		},
		{
			name:  "retries with compound units and days",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\tretries 500ms 1m30s 1d 2d\n\t}\n}",
			want: Handler{Source: "s", Inbox: &InboxConfig{
				DeliverTo: "http://a/h",
				Retries:   durs(500*time.Millisecond, 90*time.Second, 24*time.Hour, 48*time.Hour),
			}},
		},
		{
			name:  "a single retry",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\tretries 1d\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Retries: durs(24 * time.Hour)}},
		},
		{
			name:  "retries given twice: the last line wins",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\tretries 1s 2s 3s\n\t\tretries 5s\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Retries: durs(5 * time.Second)}},
		},
		{
			name:  "jitter 0%",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\tjitter 0%\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Jitter: "0%"}},
		},
		{
			name:  "jitter 12.5%",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\tjitter 12.5%\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Jitter: "12.5%"}},
		},
		{
			name:  "jitter 100%",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\tjitter 100%\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Jitter: "100%"}},
		},
		{
			name:  "timeout and concurrency",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\ttimeout 1m30s\n\t\tconcurrency 32\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Timeout: dur(90 * time.Second), Concurrency: 32}},
		},
		{
			name:  "deliver_to placeholder kept literal",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to {env.APP_URL}/hooks\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "{env.APP_URL}/hooks"}},
		},
		{
			name:  "respond 204",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\trespond 204\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Respond: 204}},
		},
		{
			name:  "fail closed with an inbox",
			input: "webhook_idempotency source s fail closed {\n\tinbox http://a/h\n}",
			want:  Handler{Source: "s", Fail: "closed", Inbox: &InboxConfig{DeliverTo: "http://a/h"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { t.Parallel(); wantParsed(t, tc.input, &tc.want) })
	}
}

func TestCaddyfileInboxParseErrors(t *testing.T) {
	t.Parallel()
	// block wraps inbox block lines (each already indented by two tabs)
	// into a handler: the first line of lines is line 3 of the Testfile
	block := func(lines ...string) string {
		return "webhook_idempotency source s {\n\tinbox {\n" + strings.Join(lines, "\n") + "\n\t}\n}"
	}
	for _, tc := range []struct {
		name  string
		input string
		want  string // the whole error message
	}{
		// deliver_to
		{"no deliver_to", block("\t\trespond 202"), "inbox needs deliver_to: the URL events are delivered to, at Testfile:2"},
		{"empty block", block(), "inbox needs deliver_to: the URL events are delivered to, at Testfile:2"},
		{"bare inbox", "webhook_idempotency source s {\n\tinbox\n}", "inbox needs deliver_to: the URL events are delivered to, at Testfile:2"},
		{"deliver_to missing value", block("\t\tdeliver_to"), "inbox 'deliver_to' takes exactly one value, got 0, at Testfile:3"},
		{"deliver_to empty", block("\t\tdeliver_to \"\""), "inbox 'deliver_to' has an empty value, at Testfile:3"},
		{"deliver_to two values", block("\t\tdeliver_to http://a/h http://b/h"), "inbox 'deliver_to' takes exactly one value, got 2, at Testfile:3"},
		{"deliver_to ftp", block("\t\tdeliver_to ftp://x"), "invalid inbox deliver_to 'ftp://x': want an absolute http:// or https:// URL with a host, at Testfile:3"},
		{"deliver_to without scheme", block("\t\tdeliver_to app:3000/hooks"), "invalid inbox deliver_to 'app:3000/hooks': want an absolute http:// or https:// URL with a host, at Testfile:3"},
		{"deliver_to a path", block("\t\tdeliver_to /hooks"), "invalid inbox deliver_to '/hooks': want an absolute http:// or https:// URL with a host, at Testfile:3"},
		{"shorthand ftp", "webhook_idempotency source s {\n\tinbox ftp://x\n}", "invalid inbox deliver_to 'ftp://x': want an absolute http:// or https:// URL with a host, at Testfile:2"},
		{"shorthand and deliver_to", "webhook_idempotency source s {\n\tinbox http://a/h {\n\t\tdeliver_to http://b/h\n\t}\n}", "inbox deliver_to given twice: 'http://a/h' and 'http://b/h', at Testfile:3"},

		// respond
		{"respond 500", block("\t\tdeliver_to http://a/h", "\t\trespond 500"), "invalid inbox respond '500': want a 2xx status, so the provider stops retrying, at Testfile:4"},
		{"respond 302", block("\t\tdeliver_to http://a/h", "\t\trespond 302"), "invalid inbox respond '302': want a 2xx status, so the provider stops retrying, at Testfile:4"},
		{"respond abc", block("\t\tdeliver_to http://a/h", "\t\trespond abc"), "invalid inbox respond 'abc': want a 2xx status, so the provider stops retrying, at Testfile:4"},
		{"respond missing", block("\t\tdeliver_to http://a/h", "\t\trespond"), "inbox 'respond' takes exactly one value, got 0, at Testfile:4"},
		{"respond two values", block("\t\tdeliver_to http://a/h", "\t\trespond 202 200"), "inbox 'respond' takes exactly one value, got 2, at Testfile:4"},

		// retries
		{"retries none", block("\t\tdeliver_to http://a/h", "\t\tretries"), "inbox 'retries' needs at least one value, at Testfile:4"},
		{"retries 0s", block("\t\tdeliver_to http://a/h", "\t\tretries 30s 0s"), "invalid inbox retry '0s': must be positive, at Testfile:4"},
		{"retries negative", block("\t\tdeliver_to http://a/h", "\t\tretries -1m"), "invalid inbox retry '-1m': must be positive, at Testfile:4"},
		{"retries bad", block("\t\tdeliver_to http://a/h", "\t\tretries 30s soon"), `invalid inbox retry 'soon': time: invalid duration "soon", at Testfile:4`},
		{"retries without unit", block("\t\tdeliver_to http://a/h", "\t\tretries 30"), `invalid inbox retry '30': time: missing unit in duration "30", at Testfile:4`},

		// jitter
		{"jitter without %", block("\t\tdeliver_to http://a/h", "\t\tjitter 10"), "invalid inbox jitter '10': want a percentage such as 10%, at Testfile:4"},
		{"jitter 150%", block("\t\tdeliver_to http://a/h", "\t\tjitter 150%"), `invalid inbox jitter '150%': want a percentage from 0% to 100%, at Testfile:4`},
		{"jitter negative", block("\t\tdeliver_to http://a/h", "\t\tjitter -5%"), `invalid inbox jitter '-5%': want a percentage from 0% to 100%, at Testfile:4`},
		{"jitter abc", block("\t\tdeliver_to http://a/h", "\t\tjitter abc"), "invalid inbox jitter 'abc': want a percentage such as 10%, at Testfile:4"},
		{"jitter abc%", block("\t\tdeliver_to http://a/h", "\t\tjitter abc%"), `invalid inbox jitter 'abc%': want a percentage from 0% to 100%, at Testfile:4`},
		{"jitter missing", block("\t\tdeliver_to http://a/h", "\t\tjitter"), "inbox 'jitter' takes exactly one value, got 0, at Testfile:4"},

		// timeout
		{"timeout bad", block("\t\tdeliver_to http://a/h", "\t\ttimeout later"), `invalid inbox timeout 'later': time: invalid duration "later", at Testfile:4`},
		{"timeout 0", block("\t\tdeliver_to http://a/h", "\t\ttimeout 0"), "invalid inbox timeout '0': must be positive, at Testfile:4"},
		{"timeout 0s", block("\t\tdeliver_to http://a/h", "\t\ttimeout 0s"), "invalid inbox timeout '0s': must be positive, at Testfile:4"},
		{"timeout missing", block("\t\tdeliver_to http://a/h", "\t\ttimeout"), "inbox 'timeout' takes exactly one value, got 0, at Testfile:4"},
		{"timeout two values", block("\t\tdeliver_to http://a/h", "\t\ttimeout 1s 2s"), "inbox 'timeout' takes exactly one value, got 2, at Testfile:4"},

		// concurrency
		{"concurrency 0", block("\t\tdeliver_to http://a/h", "\t\tconcurrency 0"), "invalid inbox concurrency '0': want a positive integer, at Testfile:4"},
		{"concurrency -1", block("\t\tdeliver_to http://a/h", "\t\tconcurrency -1"), "invalid inbox concurrency '-1': want a positive integer, at Testfile:4"},
		{"concurrency x", block("\t\tdeliver_to http://a/h", "\t\tconcurrency x"), "invalid inbox concurrency 'x': want a positive integer, at Testfile:4"},
		{"concurrency 1.5", block("\t\tdeliver_to http://a/h", "\t\tconcurrency 1.5"), "invalid inbox concurrency '1.5': want a positive integer, at Testfile:4"},
		{"concurrency missing", block("\t\tdeliver_to http://a/h", "\t\tconcurrency"), "inbox 'concurrency' takes exactly one value, got 0, at Testfile:4"},

		// the block and the inbox line
		{"unknown subdirective", block("\t\tdeliver_to http://a/h", "\t\tqueue redis"), "unrecognized inbox subdirective 'queue', at Testfile:4"},
		{"store inside inbox", block("\t\tdeliver_to http://a/h", "\t\tstore redis"), "unrecognized inbox subdirective 'store', at Testfile:4"},
		{"extra argument", "webhook_idempotency source s {\n\tinbox http://a/h http://b/h\n}", "inbox takes one deliver_to URL, got extra argument 'http://b/h', at Testfile:2"},
		{"extra argument before a block", "webhook_idempotency source s {\n\tinbox http://a/h 202 {\n\t\ttimeout 1s\n\t}\n}", "inbox takes one deliver_to URL, got extra argument '202', at Testfile:2"},
		{"inbox twice", "webhook_idempotency source s {\n\tinbox http://a/h\n\tinbox http://b/h\n}", "inbox given twice, at Testfile:3"},
		{"inbox twice, blocks", "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t}\n\tinbox {\n\t\tdeliver_to http://a/h\n\t}\n}", "inbox given twice, at Testfile:5"},
		{"inbox on the directive line", "webhook_idempotency source s inbox http://a/h", "unknown option 'inbox' on the directive line, at Testfile:1"},
		{"inbox as the first argument", "webhook_idempotency inbox http://a/h", "unknown provider or option 'inbox', at Testfile:1"},

		// the store
		{"store memory then inbox", "webhook_idempotency source s {\n\tstore memory\n\tinbox http://a/h\n}", inboxMemoryOnly + ", at Testfile:3"},
		{"inbox then store memory", "webhook_idempotency source s {\n\tinbox http://a/h\n\tstore memory\n}", inboxMemoryOnly + ", at Testfile:3"},
		{"inbox block then store memory with options", "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t}\n\tstore memory {\n\t\tmax_entries 10\n\t}\n}", inboxMemoryOnly + ", at Testfile:7"},
		{"inline store memory, inbox in the block", "webhook_idempotency source s store memory {\n\tinbox http://a/h\n}", inboxMemoryOnly + ", at Testfile:2"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}

// inboxMemoryOnly is the error of an inbox on the memory store.
const inboxMemoryOnly = "inbox mode needs a store that keeps accepted events across restarts, not memory: the file store (the default, for one Caddy) or the redis store (for several)"

// provisionInboxHandler provisions a handler from JSON as Caddy would
// (its workers are not started), and returns the handler and Provision's error. The
// handler is cleaned up when the test ends.
func provisionInboxHandler(t *testing.T, cfg string) (*Handler, error) {
	t.Helper()
	h := new(Handler)
	if err := json.Unmarshal([]byte(cfg), h); err != nil {
		t.Fatalf("decoding %s: %v", cfg, err)
	}
	ctx, cancel := testkit.NewContext(t)
	err := h.Provision(ctx)
	t.Cleanup(func() {
		_ = h.Cleanup()
		cancel() // cleans up the store module
	})
	return h, err
}

// redisStoreJSON is the JSON of a redis store at addr.
func redisStoreJSON(addr string) string {
	return fmt.Sprintf(`{"module":"redis","addresses":[%q],"timeout":2000000000}`, addr)
}

func TestInboxConfigProvisionErrors(t *testing.T) {
	t.Run("memory store", func(t *testing.T) {
		_, err := provisionInboxHandler(t, `{"source":"s","store":{"module":"memory"},"inbox":{"deliver_to":"http://127.0.0.1:9/h"}}`)
		if err == nil || err.Error() != inboxMemoryOnly {
			t.Fatalf("got error %v, want %q", err, inboxMemoryOnly)
		}
	})
	t.Run("no store: the default file store keeps the inbox", func(t *testing.T) {
		dataDir := testkit.OwnDataDir(t)
		h, err := provisionInboxHandler(t, `{"source":"s","inbox":{"deliver_to":"http://127.0.0.1:9/h"}}`)
		if err != nil {
			t.Fatalf("provision on the default store: %v", err)
		}
		if _, ok := h.store.backend.(*filestore.Store); !ok || h.inbox == nil {
			t.Fatalf("store %T, inbox %v: want an inbox on the file store", h.store.backend, h.inbox)
		}
		if fs := h.store.backend.(*filestore.Store); fs.FilePath() != filepath.Join(dataDir, "webhook_idempotency", "store.db") {
			t.Fatalf("the inbox's file store is %s, want the default file in the data directory %s", fs.FilePath(), dataDir)
		}
	})
	t.Run("fail open", func(t *testing.T) {
		// refused before any store is opened: no Redis needed
		_, err := provisionInboxHandler(t, `{"source":"s","fail":"open","store":{"module":"memory"},"inbox":{"deliver_to":"http://127.0.0.1:9/h"}}`)
		if err == nil || !strings.Contains(err.Error(), "fail open") || !strings.HasPrefix(err.Error(), "inbox mode never fails open") {
			t.Fatalf("got error %v, want inbox mode to refuse fail open", err)
		}
	})

	srv := testkit.StartRedis(t)
	store := redisStoreJSON(srv.Addr())
	for _, tc := range []struct {
		name  string
		inbox string
		extra string
		want  string // the whole error message
	}{
		{"fail open with redis", `{"deliver_to":"http://127.0.0.1:9/h"}`, `"fail":"open",`,
			"inbox mode never fails open: an event that was not stored must not be accepted (remove 'fail open')"},
		{"deliver_to ftp", `{"deliver_to":"ftp://x"}`, "", "invalid inbox deliver_to 'ftp://x': want an absolute http:// or https:// URL with a host"},
		{"deliver_to without host", `{"deliver_to":"http:///h"}`, "", "invalid inbox deliver_to 'http:///h': want an absolute http:// or https:// URL with a host"},
		{"deliver_to with a port only", `{"deliver_to":"http://:3000/h"}`, "", "invalid inbox deliver_to 'http://:3000/h': want an absolute http:// or https:// URL with a host"},
		{"deliver_to missing", `{}`, "", "inbox needs deliver_to: the URL events are delivered to"},
		{"deliver_to placeholder resolving to nothing", `{"deliver_to":"{env.WEBHOOK_IDEMPOTENCY_TEST_UNSET}"}`, "", "inbox needs deliver_to: the URL events are delivered to"},
		{"respond 500", `{"deliver_to":"http://127.0.0.1:9/h","respond":500}`, "", "invalid inbox respond '500': want a 2xx status, so the provider stops retrying"},
		{"retries zero", `{"deliver_to":"http://127.0.0.1:9/h","retries":[1000000000,0]}`, "", "invalid inbox retry '0s': must be positive"},
		{"jitter 150%", `{"deliver_to":"http://127.0.0.1:9/h","jitter":"150%"}`, "", "invalid inbox jitter '150%': want a percentage from 0% to 100%"},
		{"timeout negative", `{"deliver_to":"http://127.0.0.1:9/h","timeout":-1}`, "", "invalid inbox timeout '-1ns': must be positive"},
		{"concurrency negative", `{"deliver_to":"http://127.0.0.1:9/h","concurrency":-1}`, "", "invalid inbox concurrency '-1': want a positive integer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := `{"source":"s",` + tc.extra + `"store":` + store + `,"inbox":` + tc.inbox + `}`
			_, err := provisionInboxHandler(t, cfg)
			if err == nil {
				t.Fatalf("provision %s: want error %q, got none", cfg, tc.want)
			}
			if err.Error() != tc.want {
				t.Errorf("provision %s:\n got error  %q\n want error %q", cfg, err.Error(), tc.want)
			}
		})
	}
}

// provisionedInboxConfig returns the resolved configuration a provisioned
// handler built its inbox from, and checks that the inbox answers with it.
func provisionedInboxConfig(t *testing.T, h *Handler) inbox.Config {
	t.Helper()
	if h.inbox == nil {
		t.Fatal("no inbox after provisioning")
	}
	ic, err := h.inboxConfig()
	if err != nil {
		t.Fatalf("resolving the inbox's configuration again: %v", err)
	}
	if status, _, _ := h.inbox.Respond(); h.inbox.Source() != h.Source || status != ic.Respond {
		t.Fatalf("inbox of source %q answers %d; the configuration says source %q, respond %d",
			h.inbox.Source(), status, h.Source, ic.Respond)
	}
	return ic
}

func TestInboxConfigDefaults(t *testing.T) {
	srv := testkit.StartRedis(t)
	store := redisStoreJSON(srv.Addr())
	t.Setenv("WEBHOOK_IDEMPOTENCY_TEST_APP", "127.0.0.1:9")

	h, err := provisionInboxHandler(t, `{"source":"orders","store":`+store+`,"inbox":{"deliver_to":"http://{env.WEBHOOK_IDEMPOTENCY_TEST_APP}/hooks"}}`)
	if err != nil {
		t.Fatalf("provision: %v", err)
	}
	ic := provisionedInboxConfig(t, h)
	if ic.DeliverTo != "http://127.0.0.1:9/hooks" {
		t.Errorf("deliver_to = %q, want the placeholder resolved", ic.DeliverTo)
	}
	if status, body, _ := h.inbox.Respond(); ic.Respond != 202 || status != 202 || body != "" {
		t.Errorf("respond = %d (the inbox answers %d %q), want 202", ic.Respond, status, body)
	}
	wantRetries := []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 12 * time.Hour}
	if fmt.Sprint(ic.Retries) != fmt.Sprint(wantRetries) {
		t.Errorf("retries = %v, want %v", ic.Retries, wantRetries)
	}
	if ic.Jitter != 0.10 {
		t.Errorf("jitter = %v, want 0.10", ic.Jitter)
	}
	if ic.Timeout != 10*time.Second {
		t.Errorf("timeout = %s, want 10s", ic.Timeout)
	}
	if ic.Concurrency != 4 {
		t.Errorf("concurrency = %d, want 4", ic.Concurrency)
	}
	if !h.failClosed || h.Fail != failClosed {
		t.Errorf("fail = %q: an inbox fails closed by default (a store failure answers 503)", h.Fail)
	}
	// the stream, retry set and dead-letter stream share one Cluster slot
	rs, ok := h.store.backend.(*redisstore.Store)
	if !ok {
		t.Fatalf("store %T, want the redis store", h.store.backend)
	}
	keys := rs.Streams().Keys(ic.Source)
	for got, want := range map[string]string{keys.Inbox: "{idem:orders}:inbox", keys.Retry: "{idem:orders}:retry", keys.Dead: "{idem:orders}:dead"} {
		if got != want {
			t.Errorf("redis key %q, want %q", got, want)
		}
	}
	// an accepted key outlives every attempt: ttl, plus each retry's wait
	// at its longest, plus one timeout per attempt
	if want := 24*time.Hour + retryHorizon(wantRetries, 0.10, 10*time.Second); h.inbox.AcceptTTL() != want {
		t.Errorf("accepted key TTL = %s, want ttl + retry horizon = %s", h.inbox.AcceptTTL(), want)
	}
	if floor := 24*time.Hour + 14*time.Hour + 36*time.Minute + 30*time.Second; h.inbox.AcceptTTL() <= floor {
		t.Errorf("accepted key TTL = %s, not longer than ttl + the sum of the waits (%s)", h.inbox.AcceptTTL(), floor)
	}

	t.Run("configured values", func(t *testing.T) {
		h, err := provisionInboxHandler(t, `{"source":"shop","ttl":3600000000000,"store":`+redisStoreJSON(srv.Addr())+`,"inbox":{"deliver_to":"https://app.internal/h","respond":200,"retries":[1000000000,86400000000000],"jitter":"12.5%","timeout":2000000000,"concurrency":16}}`)
		if err != nil {
			t.Fatalf("provision: %v", err)
		}
		ic := provisionedInboxConfig(t, h)
		if ic.Respond != 200 || ic.Jitter != 0.125 || ic.Timeout != 2*time.Second || ic.Concurrency != 16 {
			t.Errorf("respond %d, jitter %v, timeout %s, concurrency %d; want 200, 0.125, 2s, 16", ic.Respond, ic.Jitter, ic.Timeout, ic.Concurrency)
		}
		if ic.DeliverTo != "https://app.internal/h" || ic.TTL != time.Hour {
			t.Errorf("deliver_to %q, ttl %s; want https://app.internal/h, 1h", ic.DeliverTo, ic.TTL)
		}
		if fmt.Sprint(ic.Retries) != fmt.Sprint([]time.Duration{time.Second, 24 * time.Hour}) {
			t.Errorf("retries = %v, want [1s 24h0m0s]", ic.Retries)
		}
		if want := time.Hour + retryHorizon([]time.Duration{time.Second, 24 * time.Hour}, 0.125, 2*time.Second); h.inbox.AcceptTTL() != want {
			t.Errorf("accepted key TTL = %s, want %s", h.inbox.AcceptTTL(), want)
		}
	})
}

// retryHorizon is how long an event can stay undelivered: one timeout per
// attempt (the first and every retry) plus each wait at its longest.
func retryHorizon(retries []time.Duration, jitter float64, timeout time.Duration) time.Duration {
	h := time.Duration(len(retries)+1) * timeout
	for _, d := range retries {
		h += time.Duration(float64(d) * (1 + jitter))
	}
	return h
}

// Two handlers with an inbox for the same source would share one stream:
// the configuration is refused as a whole.
func TestInboxConfigSameSourceTwice(t *testing.T) {
	srv := testkit.StartRedis(t)
	site := func(port int, source string) string {
		return fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency source %s {
		store redis redis://%s
		inbox http://127.0.0.1:9/hooks
	}
}`, port, source, srv.Addr())
	}
	load := func(caddyfile string) error {
		t.Helper()
		adapted, err := adaptCaddyfile(t, caddyfile)
		if err != nil {
			t.Fatalf("adapt: %v", err)
		}
		cfg := new(caddy.Config)
		if err := json.Unmarshal(adapted, cfg); err != nil {
			t.Fatal(err)
		}
		return caddy.Validate(cfg)
	}
	err := load(site(testkit.FreePort(t), "orders") + site(testkit.FreePort(t), "orders"))
	want := `two webhook_idempotency handlers have an inbox for source "orders"`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got error %v, want one containing %q", err, want)
	}
	if err := load(site(testkit.FreePort(t), "orders") + site(testkit.FreePort(t), "billing")); err != nil {
		t.Fatalf("two inboxes with distinct sources: %v", err)
	}
}
