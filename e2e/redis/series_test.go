package redise2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestRedisInstancesShareCounts: two instances on one Redis keep one set
// of counts and series for their source: what either handled adds up, and
// either's admin API shows the sum (the other's within its next flush, a
// second).
func TestRedisInstancesShareCounts(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := newKeyedUpstream(t, nil)
	portA, portB := testkit.FreePort(t), testkit.FreePort(t)
	a := testkit.StartCaddy(t, "", instanceSite(portA, srv.Addr(), "", up))
	testkit.StartProcess(t, "", instanceSite(portB, srv.Addr(), "", up), testkit.SiteURL(portB)+"/ready")
	urlA, urlB := testkit.SiteURL(portA)+"/hook", testkit.SiteURL(portB)+"/hook"

	for i := range 3 {
		mustDeliver(t, urlA, fmt.Sprint("a", i))
	}
	for i := range 4 {
		mustDeliver(t, urlB, fmt.Sprint("b", i))
	}
	mustDeliver(t, urlB, "a0") // a duplicate of A's, replayed by B
	mustDeliver(t, urlA, "b0") // and of B's, by A

	var st struct {
		Results      map[string]int64 `json:"results"`
		ResultsSince time.Time        `json:"results_since"`
	}
	var m struct {
		New      []int64 `json:"new"`
		Replayed []int64 `json:"replayed"`
	}
	testkit.Eventually(t, 10*time.Second, "both instances' counts in the store", func() bool {
		a.AdminJSON(t, http.MethodGet, "/webhook_idempotency/shop", &st)
		return st.Results["new"] == 7 && st.Results["replayed"] == 2
	})
	if st.ResultsSince.IsZero() || st.Results["new"] != 7 {
		t.Fatalf("counts: %v since %v", st.Results, st.ResultsSince)
	}
	for _, window := range []string{"1h", "24h", "7d"} {
		a.AdminJSON(t, http.MethodGet, "/webhook_idempotency/shop/minutes?window="+window, &m)
		if sumOf(m.New) != 7 || sumOf(m.Replayed) != 2 {
			t.Fatalf("%s: new %d, replayed %d, want 7 and 2", window, sumOf(m.New), sumOf(m.Replayed))
		}
	}
}

func sumOf(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}
