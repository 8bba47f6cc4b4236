package webhookidempotency

import (
	"fmt"
	"net/http"
	"testing"
)

func TestE2EDuplicateIsReplayed(t *testing.T) {
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency source test
	reverse_proxy %s
}`, port, up.addr()))

	url := siteURL(port) + "/hook"
	first, firstBody := post(t, url, []byte(`{"id":"evt_1"}`), "Idempotency-Key", "evt_1")
	second, secondBody := post(t, url, []byte(`{"id":"evt_1"}`), "Idempotency-Key", "evt_1")

	if first.StatusCode != http.StatusOK || second.StatusCode != http.StatusOK {
		t.Fatalf("statuses: %d, %d", first.StatusCode, second.StatusCode)
	}
	if got := up.calls.Load(); got != 1 {
		t.Fatalf("upstream called %d times, want 1", got)
	}
	if string(secondBody) != string(firstBody) || string(firstBody) != `{"call":1}` {
		t.Fatalf("bodies: %q then %q", firstBody, secondBody)
	}
	if first.Header.Get(replayedHeader) != "" || second.Header.Get(replayedHeader) != "true" {
		t.Fatalf("Idempotent-Replayed: %q then %q", first.Header.Get(replayedHeader), second.Header.Get(replayedHeader))
	}
	if second.Header.Get("X-Upstream-Call") != "1" || second.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("replayed headers: %v", second.Header)
	}
}
