package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// A store file deleted under the running Caddy is noticed within seconds:
// logged at ERROR, counted, and shown unhealthy in /metrics and in the
// admin API's source (docs/stores.md). Before, nothing noticed: duplicates were replayed from
// memory until a restart, after which every earlier delivery ran again.
func TestStoreFileDeletedIsNoticed(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "store.db")
	logPath := filepath.Join(dir, "caddy.log")
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, fmt.Sprintf(`log capture {
		output file %s
		include http.handlers.webhook_idempotency http.webhook_idempotency
	}`, logPath), testkit.ProxySite(port, "webhook_idempotency {\n\t\tsource lostfile\n\t\tstore file "+path+"\n\t}", up))
	url := testkit.SiteURL(port) + "/hook"
	for i := range 20 {
		resp, b := testkit.Post(t, url, []byte(`{"n":1}`), "Idempotency-Key", fmt.Sprint("lost-", i))
		testkit.WantNew(t, resp, b, http.StatusOK)
	}
	metric := func(name string) (float64, bool) { return c.Metrics(t).Value(name, "path", path) }
	if v, ok := metric("caddy_webhook_idempotency_store_file_healthy"); !ok || v != 1 {
		t.Fatalf("store_file_healthy %v (present %v), want 1", v, ok)
	}
	if v, ok := metric("caddy_webhook_idempotency_store_file_lost_total"); !ok || v != 0 {
		t.Fatalf("store_file_lost_total %v (present %v), want 0", v, ok)
	}
	// the admin API's source shows the store's health (docs/admin.md)
	type health struct {
		Healthy *bool   `json:"healthy"`
		Error   *string `json:"error"`
	}
	storeHealth := func() health {
		var src struct {
			StoreHealth *health `json:"store_health"`
		}
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/lostfile", &src)
		if src.StoreHealth == nil || src.StoreHealth.Healthy == nil || src.StoreHealth.Error == nil {
			t.Fatalf("GET /webhook_idempotency/lostfile: store_health %+v, want healthy and error", src.StoreHealth)
		}
		return *src.StoreHealth
	}
	if h := storeHealth(); !*h.Healthy || *h.Error != "" {
		t.Fatalf("store_health before the loss: healthy %v, error %q", *h.Healthy, *h.Error)
	}

	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testkit.Eventually(t, 20*time.Second, "the deleted file noticed", func() bool {
		v, _ := metric("caddy_webhook_idempotency_store_file_healthy")
		return v == 0
	})
	t.Logf("noticed after %s", time.Since(start).Round(100*time.Millisecond))
	if v, _ := metric("caddy_webhook_idempotency_store_file_lost_total"); v != 1 {
		t.Fatalf("store_file_lost_total %v, want 1", v)
	}
	logs, _ := os.ReadFile(logPath)
	var line string
	for l := range strings.Lines(string(logs)) {
		if strings.Contains(l, `"level":"error"`) && strings.Contains(l, "was deleted while Caddy runs") {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("no ERROR line for the deleted file in:\n%s", logs)
	}
	testkit.MustContain(t, line, path, `"open_file":"/proc/`)
	if h := storeHealth(); *h.Healthy || !strings.Contains(*h.Error, "was deleted while Caddy runs") {
		t.Fatalf("store_health after the loss: healthy %v, error %q", *h.Healthy, *h.Error)
	}
	// duplicates are still answered meanwhile
	resp, b := testkit.Post(t, url, []byte(`{"n":1}`), "Idempotency-Key", "lost-3")
	if resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("a duplicate after the loss: %d %s", resp.StatusCode, b)
	}
}
