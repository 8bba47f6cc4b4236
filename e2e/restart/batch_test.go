package restart

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// batchIDs returns the ids of the items of a body {"items":[{"id":…}]}.
func batchIDs(body []byte) []string {
	var env struct {
		Items []struct {
			ID string `json:"id"`
		} `json:"items"`
	}
	_ = json.Unmarshal(body, &env)
	var ids []string
	for _, it := range env.Items {
		ids = append(ids, it.ID)
	}
	return ids
}

// batchBody is a batch holding items with these ids.
func batchBody(ids ...string) []byte {
	items := make([]map[string]string, len(ids))
	for i, id := range ids {
		items[i] = map[string]string{"id": id}
	}
	b, _ := json.Marshal(map[string]any{"items": items})
	return b
}

// TestKillBetweenBatchClaimAndCompletion: Caddy is killed (SIGKILL) while
// the application holds a batch whose new items are claimed; after a
// restart the provider's retry hands those items on again once their
// lease has run out, none lost, and the items completed before the kill
// are not handed on again.
func TestKillBetweenBatchClaimAndCompletion(t *testing.T) {
	var mu sync.Mutex
	var got [][]string
	held := make(chan struct{})
	var holdOnce sync.Once
	var up *testkit.Upstream
	up = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if r.Method != http.MethodPost {
			return // the probe of a start
		}
		ids := batchIDs(up.Requests()[call-1].Body)
		mu.Lock()
		got = append(got, ids)
		first := len(got) == 2
		mu.Unlock()
		if first {
			// the second request is held until Caddy dies under it
			holdOnce.Do(func() { close(held) })
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	data := t.TempDir()
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source batch-kill
		lease 2s
		store file {
			sync always
		}
		batch json:items {
			key json:id
		}
	}
	reverse_proxy %s
}`, port, up.Addr())
	p := startCaddyProcess(t, data, sites, testkit.SiteURL(port)+"/")

	if r := testkit.Send(http.MethodPost, url, bytes.NewReader(batchBody("a", "b"))); r.Err != nil || r.Status != http.StatusOK {
		t.Fatalf("first batch: %v %d\n%s", r.Err, r.Status, p.log)
	}
	go func() {
		// answered by no one: Caddy dies under it
		if resp, err := http.Post(url, "application/json", bytes.NewReader(batchBody("b", "c", "d"))); err == nil {
			resp.Body.Close()
		}
	}()
	select {
	case <-held:
	case <-time.After(60 * time.Second):
		t.Fatal("the application never got the second batch")
	}
	p.kill()
	runCaddyProcess(t, data, p.config, testkit.SiteURL(port)+"/")

	// the retry (409 as long as the dead request's claim lasts) hands the
	// items it held on again
	testkit.WaitFor(t, 60*time.Second, "the retried batch handed on", func() (bool, string) {
		resp, body := testkit.Post(t, url, batchBody("b", "c", "d"))
		return resp.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", resp.StatusCode, body)
	})
	resp, _ := testkit.Post(t, url, batchBody("d", "a", "c", "b"))
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("every item seen: %d %v", resp.StatusCode, resp.Header)
	}
	mu.Lock()
	defer mu.Unlock()
	want := [][]string{{"a", "b"}, {"c", "d"}, {"c", "d"}}
	if !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("the application got %v, want %v", got, want)
	}
}
