package webhookidempotency

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestInboxSmoke(t *testing.T) {
	srv := startRedis(t)
	app := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call < 3 {
			w.WriteHeader(500)
			return
		}
		w.WriteHeader(200)
	})
	port := freePort(t)
	startCaddy(t, "", fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source s
		store redis redis://%s
		inbox {
			deliver_to %s/hook
			retries 200ms 400ms
			jitter 0%%
			timeout 1s
		}
	}
}`, port, srv.addr(), app.URL))
	resp, body := post(t, siteURL(port)+"/x", []byte(`{"a":1}`), "Idempotency-Key", "k1")
	if resp.StatusCode != 202 {
		t.Fatalf("status %d %s", resp.StatusCode, body)
	}
	resp, _ = post(t, siteURL(port)+"/x", []byte(`{"a":1}`), "Idempotency-Key", "k1")
	if resp.StatusCode != 202 || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("dup status %d %v", resp.StatusCode, resp.Header)
	}
	deadline := time.Now().Add(5 * time.Second)
	for app.calls.Load() < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	reqs := app.requests()
	if len(reqs) != 3 {
		t.Fatalf("upstream got %d requests", len(reqs))
	}
	for i, r := range reqs {
		t.Logf("attempt %d: %s %s", i+1, r.Header.Get("Webhook-Attempt"), r.Header.Get("Idempotency-Key"))
	}
	if reqs[2].Header.Get("Webhook-Attempt") != "3" || string(reqs[2].Body) != `{"a":1}` {
		t.Fatalf("third: %v %s", reqs[2].Header, reqs[2].Body)
	}
	time.Sleep(300 * time.Millisecond)
	c := srv.client(t)
	if n := c.XLen(t.Context(), "{idem:s}:inbox").Val(); n != 0 {
		t.Fatalf("stream len %d", n)
	}
}
