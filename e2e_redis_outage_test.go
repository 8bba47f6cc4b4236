package webhookidempotency

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// During a Redis stall, a duplicate of a delivery this instance completed
// recently is answered from its local copy of the record, not executed
// again (docs/stores.md: When Redis fails).
func TestRedisStallReplaysRecentDeliveries(t *testing.T) {
	for _, fail := range []string{"open", "closed"} {
		t.Run(fail, func(t *testing.T) {
			srv := startRedis(t)
			up := newUpstream(t, nil)
			port := freePort(t)
			startCaddy(t, "", redisChaosSite(port, srv, fail, up.addr()))
			url := siteURL(port) + "/hook"
			const deliveries = 50
			for i := range deliveries {
				key := fmt.Sprintf("evt_stall_%s_%d", fail, i)
				resp, body := post(t, url, []byte(key), "Idempotency-Key", key)
				wantNew(t, resp, body, http.StatusOK)
			}

			srv.pause()
			stalled := time.Now()
			before := up.calls.Load()
			sent, replayed := 0, 0
			for round := 0; round < 3; round++ {
				for i := range deliveries {
					key := fmt.Sprintf("evt_stall_%s_%d", fail, i)
					resp, body := post(t, url, []byte(key), "Idempotency-Key", key)
					sent++
					if resp.Header.Get(replayedHeader) == "true" && string(body) == fmt.Sprintf(`{"call":%d}`, i+1) {
						replayed++
					}
				}
			}
			executed := up.calls.Load() - before
			// a delivery never seen is not in any copy: the fail policy applies
			resp, _ := post(t, url, []byte("evt_stall_new"), "Idempotency-Key", "evt_stall_new_"+fail)
			wantStatus := map[string]int{"open": http.StatusOK, "closed": http.StatusServiceUnavailable}[fail]
			if resp.StatusCode != wantStatus || resp.Header.Get(replayedHeader) != "" {
				t.Fatalf("a new delivery during the stall: %d (replayed %q), want %d", resp.StatusCode, resp.Header.Get(replayedHeader), wantStatus)
			}
			if d := 3*time.Second - time.Since(stalled); d > 0 {
				time.Sleep(d) // a stall of at least 3s
			}
			srv.resume()
			t.Logf("fail %s: %d duplicates during a %v Redis stall: %d replayed, %d executed again",
				fail, sent, time.Since(stalled).Round(100*time.Millisecond), replayed, executed)
			if replayed != sent || executed != 0 {
				t.Fatalf("fail %s: %d of %d duplicates replayed during the stall, %d executed again", fail, replayed, sent, executed)
			}
			waitForDedup(t, url, 5*time.Second)
		})
	}
}
