package redise2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// Batches (docs/caddyfile.md: Batches) on Redis: a request's items are
// claimed in one round trip, each item by exactly one request of any
// number at once, on a standalone Redis and across a Cluster's masters.

// itemApp counts the items it is given, by id.
type itemApp struct {
	*testkit.Upstream
	mu    sync.Mutex
	items map[string]int
}

func newItemApp(t *testing.T) *itemApp {
	a := &itemApp{items: make(map[string]int)}
	a.Upstream = testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		var env struct {
			Items []struct {
				ID string `json:"id"`
			} `json:"items"`
		}
		if err := json.Unmarshal(a.Requests()[call-1].Body, &env); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		a.mu.Lock()
		for _, it := range env.Items {
			a.items[it.ID]++
		}
		a.mu.Unlock()
		time.Sleep(5 * time.Millisecond) // long enough for batches to overlap
		w.WriteHeader(http.StatusOK)
	})
	return a
}

// windows sends, from many goroutines at once, every window of width
// consecutive ids out of n, rounds times over, to the urls in turn; a 409
// (an item in flight) is retried as a provider would. It returns the
// answers that were neither 200 nor, in the end, a retried 409.
func windows(t *testing.T, urls []string, n, width, rounds int) []string {
	var mu sync.Mutex
	var failed []string
	var wg sync.WaitGroup
	for round := range rounds {
		for i := 0; i+width <= n; i++ {
			url := urls[(round+i)%len(urls)]
			wg.Go(func() {
				items := make([]map[string]string, width)
				for j := range items {
					items[j] = map[string]string{"id": fmt.Sprintf("evt_%03d", i+j), "round": fmt.Sprint(round)}
				}
				body, _ := json.Marshal(map[string]any{"items": items})
				// retried for as long as a loaded machine may keep the
				// windows overlapping it in flight
				deadline := time.Now().Add(time.Minute)
				for {
					r := testkit.Send(http.MethodPost, url, bytes.NewReader(body))
					if r.Err == nil && r.Status == http.StatusOK {
						return
					}
					if (r.Err == nil && r.Status != http.StatusConflict) || time.Now().After(deadline) {
						mu.Lock()
						failed = append(failed, fmt.Sprintf("window %d round %d: %v %d %s", i, round, r.Err, r.Status, r.Body))
						mu.Unlock()
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			})
		}
	}
	wg.Wait()
	return failed
}

// wantEachOnce checks that the application got each of n items once.
func (a *itemApp) wantEachOnce(t *testing.T, n int) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		id := fmt.Sprintf("evt_%03d", i)
		if c := a.items[id]; c != 1 {
			t.Errorf("%s handed on %d times", id, c)
		}
	}
	if len(a.items) != n {
		t.Errorf("the application got %d distinct items, want %d", len(a.items), n)
	}
}

const batchLines = "batch json:items {\n\t\t\t\tkey json:id\n\t\t\t}"

func TestRedisBatchTwoInstancesOverlapping(t *testing.T) {
	srv := testkit.StartRedis(t)
	app := newItemApp(t)
	portA, portB := testkit.FreePort(t), testkit.FreePort(t)
	site := func(port int) string {
		return fmt.Sprintf(`:%d {
	handle /ready {
		respond "ready"
	}
	handle {
		webhook_idempotency {
			source items
			%s
			store redis redis://%s {
				timeout 5s
			}
		}
		reverse_proxy %s
	}
}`, port, batchLines, srv.Addr(), app.Addr())
	}
	testkit.StartCaddy(t, "", site(portA))
	testkit.StartProcess(t, "", site(portB), testkit.SiteURL(portB)+"/ready")
	urls := []string{testkit.SiteURL(portA) + "/hook", testkit.SiteURL(portB) + "/hook"}

	if failed := windows(t, urls, 40, 5, 3); len(failed) > 0 {
		t.Fatalf("%d batches failed: %v", len(failed), failed)
	}
	app.wantEachOnce(t, 40)
}

func TestRedisClusterBatchAcrossMasters(t *testing.T) {
	c := testkit.StartCluster(t)
	app := newItemApp(t)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source items
		%s
		%s
	}
	reverse_proxy %s
}`, port, batchLines, c.StoreBlock("timeout 5s"), app.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	if failed := windows(t, []string{url}, 30, 6, 3); len(failed) > 0 {
		t.Fatalf("%d batches failed: %v", len(failed), failed)
	}
	app.wantEachOnce(t, 30)
	// every item's key is on the master its slot names, and completed
	cc := c.Client(t)
	for i := range 30 {
		key := fmt.Sprintf("idem:items:evt_%03d", i)
		if n, err := cc.Exists(t.Context(), key).Result(); err != nil || n != 1 {
			t.Fatalf("%s: exists %d, %v", key, n, err)
		}
	}
}
