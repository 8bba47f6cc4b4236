package webhookidempotency

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// The inbox's delivery control in the Caddyfile and in JSON: order_by,
// rate and partitions parsed, refused with the token and its line, and
// resolved into the inbox's configuration.

func TestCaddyfileInboxDeliveryControl(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		input string
		want  Handler
	}{
		{
			name: "the block of docs/inbox.md",
			input: `webhook_idempotency stripe {
	secret whsec_x
	inbox http://app:3000/hooks {
		order_by   json:data.object.id header:X-Order-Key
		rate       10/s
		partitions 4
	}
}`,
			want: Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"whsec_x"}}, Inbox: &InboxConfig{
				DeliverTo: "http://app:3000/hooks", OrderBy: []string{"json:data.object.id", "header:X-Order-Key"}, Rate: "10/s", Partitions: 4,
			}},
		},
		{
			name:  "a rate per minute, one query source",
			input: "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n\t\trate 600/m\n\t\torder_by query:account\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Rate: "600/m", OrderBy: []string{"query:account"}}},
		},
		{
			name:  "a rate per hour",
			input: "webhook_idempotency source s {\n\tinbox http://a/h {\n\t\trate 1/h\n\t}\n}",
			want:  Handler{Source: "s", Inbox: &InboxConfig{DeliverTo: "http://a/h", Rate: "1/h"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) { t.Parallel(); wantParsed(t, tc.input, &tc.want) })
	}
}

func TestCaddyfileInboxDeliveryControlErrors(t *testing.T) {
	t.Parallel()
	// the first of lines is line 4 of the Testfile
	block := func(lines ...string) string {
		return "webhook_idempotency source s {\n\tinbox {\n\t\tdeliver_to http://a/h\n" + strings.Join(lines, "\n") + "\n\t}\n}"
	}
	for _, tc := range []struct {
		name, input, want string
	}{
		{"order_by without a source", block("\t\torder_by"), "inbox 'order_by' needs at least one value, at Testfile:4"},
		{"order_by body", block("\t\torder_by json:id body"), "invalid inbox order_by source 'body': each body would be a group of its own; want header:<name>, json:<path> or query:<name>, at Testfile:4"},
		{"order_by unknown kind", block("\t\torder_by cookie:x"), `invalid inbox order_by source: invalid key source "cookie:x": unknown kind "cookie" (want header, json, query or body), at Testfile:4`},
		{"order_by a gjson query", block("\t\torder_by json:items.#.id"), `invalid inbox order_by source: invalid key source "json:items.#.id": path uses gjson query syntax '#': only names and array indexes separated by dots are supported (write a literal '#' as '\#'), at Testfile:4`},
		{"rate without a unit", block("\t\trate 10"), "invalid inbox rate '10': want <n>/<s|m|h> with n from 1 to 1000000, such as 10/s, at Testfile:4"},
		{"rate zero", block("\t\trate 0/s"), "invalid inbox rate '0/s': want <n>/<s|m|h> with n from 1 to 1000000, such as 10/s, at Testfile:4"},
		{"rate per day", block("\t\trate 10/d"), "invalid inbox rate '10/d': the unit after '/' must be s, m or h, at Testfile:4"},
		{"rate two values", block("\t\trate 10/s 20/s"), "inbox 'rate' takes exactly one value, got 2, at Testfile:4"},
		{"partitions zero", block("\t\tpartitions 0"), "invalid inbox partitions '0': want a number from 1 to 64, at Testfile:4"},
		{"partitions 65", block("\t\tpartitions 65"), "invalid inbox partitions '65': want a number from 1 to 64, at Testfile:4"},
		{"partitions x", block("\t\tpartitions x"), "invalid inbox partitions 'x': want a number from 1 to 64, at Testfile:4"},
	} {
		t.Run(tc.name, func(t *testing.T) { wantParseError(t, tc.input, tc.want) })
	}
}

func TestInboxDeliveryControlProvision(t *testing.T) {
	srv := testkit.StartRedis(t)
	store := redisStoreJSON(srv.Addr())

	t.Run("resolved", func(t *testing.T) {
		h, err := provisionInboxHandler(t, `{"source":"ord","store":`+store+`,"inbox":{"deliver_to":"http://127.0.0.1:9/h","order_by":["json:data.object.id","header:X-Key"],"rate":"5/s","partitions":3}}`)
		if err != nil {
			t.Fatalf("provision: %v", err)
		}
		ic := provisionedInboxConfig(t, h)
		if ic.Rate != (inbox.Rate{N: 5, Per: time.Second}) || ic.Partitions != 3 || len(ic.OrderBy) != 2 || ic.GroupOf == nil {
			t.Fatalf("rate %v, partitions %d, order_by %v (resolver %t); want 5/s, 3, two sources", ic.Rate, ic.Partitions, ic.OrderBy, ic.GroupOf != nil)
		}
		// the first source with a value gives the group
		for _, c := range []struct {
			headers, body, want string
		}{
			{"X-Key: k1\r\n", `{"data":{"object":{"id":"sub_1"}}}`, "sub_1"},
			{"X-Key: k1\r\n", `{"data":{"object":{}}}`, "k1"},
			{"X-Key: k1\r\n", `{"data":{"object":{"id":42}}}`, "42"},
			{"", `{}`, ""},
			{"", `{"data":{"object":{"id":"` + strings.Repeat("x", 201) + `"}}}`, "sha256:"},
		} {
			got := ic.GroupOf(&event.Request{Headers: c.headers, Body: []byte(c.body), URI: "/h"})
			if got != c.want && !(strings.HasSuffix(c.want, ":") && strings.HasPrefix(got, c.want) && len(got) == len(c.want)+64) {
				t.Errorf("group of headers %q body %q = %q, want %q", c.headers, c.body, got, c.want)
			}
		}
	})
	t.Run("defaults", func(t *testing.T) {
		h, err := provisionInboxHandler(t, `{"source":"plain","store":`+store+`,"inbox":{"deliver_to":"http://127.0.0.1:9/h"}}`)
		if err != nil {
			t.Fatalf("provision: %v", err)
		}
		ic := provisionedInboxConfig(t, h)
		if ic.Rate.N != 0 || ic.Partitions != 1 || ic.GroupOf != nil || ic.OrderBy != nil {
			t.Fatalf("rate %v, partitions %d, order_by %v; want no rate, 1 partition, unordered", ic.Rate, ic.Partitions, ic.OrderBy)
		}
	})
	t.Run("query source", func(t *testing.T) {
		h, err := provisionInboxHandler(t, `{"source":"q","store":`+store+`,"inbox":{"deliver_to":"http://127.0.0.1:9/h","order_by":["query:account"]}}`)
		if err != nil {
			t.Fatalf("provision: %v", err)
		}
		ic := provisionedInboxConfig(t, h)
		if got := ic.GroupOf(&event.Request{URI: "/h?x=1&account=acct_9"}); got != "acct_9" {
			t.Fatalf("group %q, want acct_9", got)
		}
	})
	for _, tc := range []struct{ name, inbox, want string }{
		{"rate", `{"deliver_to":"http://127.0.0.1:9/h","rate":"fast"}`, "invalid inbox rate 'fast': want <n>/<s|m|h> with n from 1 to 1000000, such as 10/s"},
		{"partitions", `{"deliver_to":"http://127.0.0.1:9/h","partitions":100}`, "invalid inbox partitions '100': want a number from 1 to 64"},
		{"order_by body", `{"deliver_to":"http://127.0.0.1:9/h","order_by":["body"]}`, "invalid inbox order_by source 'body': each body would be a group of its own; want header:<name>, json:<path> or query:<name>"},
	} {
		t.Run("refused "+tc.name, func(t *testing.T) {
			_, err := provisionInboxHandler(t, `{"source":"s","store":`+store+`,"inbox":`+tc.inbox+`}`)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("got error %v, want %q", err, tc.want)
			}
		})
	}
	t.Run("partitions on the file store", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "store.db")
		_, err := provisionInboxHandler(t, `{"source":"s","store":{"module":"file","path":"`+path+`"},"inbox":{"deliver_to":"http://127.0.0.1:9/h","partitions":2}}`)
		if err == nil || !strings.Contains(err.Error(), "the file store keeps one queue per source") {
			t.Fatalf("got error %v, want partitions refused on the file store", err)
		}
	})
}
