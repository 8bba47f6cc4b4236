package webhookidempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Regression tests for what a hostile probe found (docs: Guarantees in
// README and docs/stores.md), each against a real Caddy and upstream.

// A header value cannot stand in for another delivery's body hash: with
// the default chain `header:Idempotency-Key body`, a delivery whose header
// spells out `sha256:<hex>` of a body B, or carries B itself as a long or
// non-ASCII value, must not claim the key B gets when it arrives without
// the header.
func TestE2EHeaderValueCannotClaimABodyHash(t *testing.T) {
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", proxySite(port, "webhook_idempotency source collide", up))
	url := siteURL(port) + "/hook"

	long := strings.Repeat("L", 300)
	for _, tc := range []struct {
		name, header string
		body         []byte // the victim's body, sent without the header
	}{
		{"spelled-out body hash", sha256Key(`{"id":"evt_victim","amount":100}`), []byte(`{"id":"evt_victim","amount":100}`)},
		{"long value equal to a body", long, []byte(long)},
		{"non-ASCII value equal to a body", "pagamento-ç", []byte("pagamento-ç")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := up.calls.Load()
			resp, body := post(t, url, []byte(`{"id":"evt_attacker"}`), "Idempotency-Key", tc.header)
			wantNew(t, resp, body, http.StatusOK)
			resp, body = post(t, url, tc.body)
			wantNew(t, resp, body, http.StatusOK)
			if got := up.calls.Load() - before; got != 2 {
				t.Fatalf("upstream called %d times, want 2: the header claimed the body's key", got)
			}
			// each is still deduplicated on its own key
			resp, _ = post(t, url, tc.body)
			if resp.Header.Get(replayedHeader) != "true" {
				t.Fatal("the victim's duplicate is not replayed")
			}
			resp, _ = post(t, url, []byte(`{"id":"evt_attacker"}`), "Idempotency-Key", tc.header)
			if resp.Header.Get(replayedHeader) != "true" {
				t.Fatal("the header's duplicate is not replayed")
			}
		})
	}
}

// keySHA256 is the `key-sha256:<hex>` form of a hashed key value.
func keySHA256(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "key-sha256:" + hex.EncodeToString(sum[:])
}

// deliverKeys sends one delivery per key to url and fails unless each is
// processed; then it sends each again and returns how many of those
// duplicates were not replayed (their keys were evicted).
func deliverKeys(t *testing.T, url string, keys []string) (notReplayed int) {
	t.Helper()
	for _, k := range keys {
		resp, body := post(t, url, []byte(k), "Idempotency-Key", k)
		wantNew(t, resp, body, http.StatusOK)
	}
	for _, k := range keys {
		resp, _ := post(t, url, []byte(k), "Idempotency-Key", k)
		if resp.Header.Get(replayedHeader) != "true" {
			notReplayed++
		}
	}
	return notReplayed
}

func keyList(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%s_%d", prefix, i)
	}
	return keys
}

// The memory store's max_entries bounds the table, not each of its parts:
// at 90% of the bound no completed key is evicted.
func TestE2EMemoryStoreKeepsKeysUpToTheBound(t *testing.T) {
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", proxySite(port, `webhook_idempotency {
		source bound
		store memory {
			max_entries 1000
		}
	}`, up))
	if n := deliverKeys(t, siteURL(port)+"/hook", keyList("evt_bound", 900)); n != 0 {
		t.Fatalf("%d of 900 completed keys evicted at 90%% of max_entries 1000", n)
	}
}

// memoryTableBound returns the bound of the process-wide memory table.
func memoryTableBound(t *testing.T) int64 {
	t.Helper()
	var bound int64 = -1
	memoryPool.Range(func(_, v any) bool {
		bound = v.(*memoryTable).maxEntries.Load()
		return false
	})
	if bound < 0 {
		t.Fatal("no memory table in use")
	}
	return bound
}

// One handler's max_entries never lowers another's: the shared table holds
// the largest bound configured, whatever the order of the handlers, and a
// handler without a store line (the default store) lowers nothing.
func TestE2EMemoryStoreBoundIsTheLargestConfigured(t *testing.T) {
	route := func(path, store string) string {
		return fmt.Sprintf(`route /%s {
		webhook_idempotency {
			source %s
			%s
		}
		reverse_proxy {{upstream}}
	}`, path, path, store)
	}
	small := "store memory {\n\t\t\tmax_entries 1000\n\t\t}"
	large := "store memory {\n\t\t\tmax_entries 1500\n\t\t}"
	for _, order := range [][2]string{{large, small}, {small, large}} {
		t.Run("", func(t *testing.T) {
			up := newUpstream(t, nil)
			port := freePort(t)
			site := fmt.Sprintf(":%d {\n\t%s\n\t%s\n}\n", port, route("a", order[0]), route("b", order[1]))
			startCaddy(t, "", strings.ReplaceAll(site, "{{upstream}}", up.addr()))
			if got := memoryTableBound(t); got != 1500 {
				t.Fatalf("table bound %d, want 1500 (the largest configured)", got)
			}
			url := siteURL(port) + "/a"
			if order[1] == large {
				url = siteURL(port) + "/b"
			}
			if n := deliverKeys(t, url, keyList("evt_largest", 1400)); n != 0 {
				t.Fatalf("%d of 1400 completed keys evicted under the largest bound 1500", n)
			}
		})
	}
	for _, order := range [][2]string{{"store memory {\n\t\t\tmax_entries 200000\n\t\t}", ""}, {"", "store memory {\n\t\t\tmax_entries 200000\n\t\t}"}} {
		t.Run("", func(t *testing.T) {
			up := newUpstream(t, nil)
			port := freePort(t)
			site := fmt.Sprintf(":%d {\n\t%s\n\t%s\n}\n", port, route("a", order[0]), route("b", order[1]))
			startCaddy(t, "", strings.ReplaceAll(site, "{{upstream}}", up.addr()))
			if got := memoryTableBound(t); got != 200000 {
				t.Fatalf("table bound %d, want 200000: a handler without a store line lowered it", got)
			}
		})
	}
}

var _ = bytes.Equal
