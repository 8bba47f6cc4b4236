package restart

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// sourceCounts is what the admin API reports of a source's counts
// (docs/admin.md: source).
type sourceCounts struct {
	Results      map[string]int64 `json:"results"`
	ResultsSince time.Time        `json:"results_since"`
}

// sourceSeries is what it reports of its series (docs/admin.md: minutes).
type sourceSeries struct {
	New      []int64 `json:"new"`
	Replayed []int64 `json:"replayed"`
}

// counts reads a source's counts and its series over window from the
// admin API of the Caddy on port admin.
func counts(t *testing.T, admin int, source, window string) (status sourceCounts, series sourceSeries) {
	t.Helper()
	for path, v := range map[string]any{
		"/webhook_idempotency/" + source:                               &status,
		"/webhook_idempotency/" + source + "/minutes?window=" + window: &series,
	} {
		resp, body := testkit.Do(t, http.MethodGet, fmt.Sprintf("http://localhost:%d%s", admin, path), nil)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s %s", path, resp.Status, body)
		}
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return status, series
}

func sum(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// TestRestartKeepsCountsAndSeries: the counts of a source's results and
// its series are kept in the file store: after a graceful restart on the
// same file the admin API shows what came before, and counts on.
func TestRestartKeepsCountsAndSeries(t *testing.T) {
	up := newKeyedUpstream(t)
	data := t.TempDir()
	port := testkit.FreePort(t)
	url := testkit.SiteURL(port) + "/hook"
	sites := fmt.Sprintf(`:%d {
	webhook_idempotency {
		source restart_series
	}
	reverse_proxy %s
}`, port, up.Addr())
	p := startCaddyProcess(t, data, sites, testkit.SiteURL(port)+"/")
	deliver := func(key string) {
		t.Helper()
		if resp, b := testkit.Post(t, url, []byte(`{"id":"`+key+`"}`), "Idempotency-Key", key); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", key, resp.Status, b)
		}
	}
	for _, key := range []string{"s1", "s2", "s3", "s4", "s5", "s1", "s2"} {
		deliver(key)
	}
	before, _ := counts(t, p.admin, "restart_series", "1h")
	if before.Results["new"] != 5 || before.Results["replayed"] != 2 {
		t.Fatalf("before the restart: %v since %v", before.Results, before.ResultsSince)
	}
	p.stop()

	q := runCaddyProcess(t, data, p.config, testkit.SiteURL(port)+"/")
	q.admin = p.admin
	for _, window := range []string{"1h", "24h", "7d"} {
		st, s := counts(t, q.admin, "restart_series", window)
		if st.Results["new"] != 5 || st.Results["replayed"] != 2 || st.ResultsSince.IsZero() || !st.ResultsSince.Equal(before.ResultsSince) {
			t.Fatalf("after the restart: %v since %v, want new 5, replayed 2 since %v", st.Results, st.ResultsSince, before.ResultsSince)
		}
		if sum(s.New) != 5 || sum(s.Replayed) != 2 {
			t.Fatalf("after the restart, %s: new %d, replayed %d", window, sum(s.New), sum(s.Replayed))
		}
	}
	deliver("s6")
	if st, s := counts(t, q.admin, "restart_series", "1h"); st.Results["new"] != 6 || sum(s.New) != 6 {
		t.Fatalf("counting on after the restart: %v, series %d", st.Results, sum(s.New))
	}
}
