package admin

import (
	"cmp"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// minutesSite is a route that verifies an HMAC, with a small max_body.
func minutesSite(port int, source string, up *testkit.Upstream) string {
	return fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		store memory
		max_body 1KiB
		verify hmac {
			header X-Sig
			secret minutes-secret
		}
	}
	reverse_proxy %s
}
`, port, source, up.Addr())
}

// minutesSig is body's signature for minutesSite.
func minutesSig(body string) string {
	m := hmac.New(sha256.New, []byte("minutes-secret"))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// minutesPost posts body signed for minutesSite.
func minutesPost(t *testing.T, url, body, key string) *http.Response {
	t.Helper()
	resp, _ := testkit.Post(t, url, []byte(body), "X-Sig", minutesSig(body), "Idempotency-Key", key)
	return resp
}

// expectClient sends a body only once the server asks for it with
// 100 Continue, however long a loaded machine takes to answer.
var expectClient = &http.Client{Timeout: time.Minute, Transport: &http.Transport{ExpectContinueTimeout: time.Minute}}

// minutesPostTooLarge posts body, signed for minutesSite and over its
// max_body, announced with `Expect: 100-continue`: the 413 comes before any
// of the body is sent (docs/caddyfile.md, max_body). A body sent at once
// races the close that follows the 413 (half a second later): a client
// held up past it by a loaded machine writes into a closed connection and
// is reset before it reads the answer, and the delivery could not be told
// from one lost on the way.
func minutesPostTooLarge(t *testing.T, url, body, key string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Expect", "100-continue")
	req.Header.Set("X-Sig", minutesSig(body))
	req.Header.Set("Idempotency-Key", key)
	resp, err := expectClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s over max_body: %v", url, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// sumOf adds a series up.
func sumOf(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// TestAdminMinutes: GET /webhook_idempotency/<source>/minutes answers the
// last hour of the source's results a minute at a time, from real traffic:
// new, replayed, and refused (an invalid signature and a body over
// max_body, failed for none); a request that is no delivery (a GET,
// skipped) is not counted. The history survives a reload.
func TestAdminMinutes(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	// a source of its own: the rings and the memory store live as long as
	// the test process
	src := fmt.Sprintf("minutes_api_%d", time.Now().UnixNano())
	c := testkit.StartCaddy(t, "", minutesSite(port, src, up))
	url := testkit.SiteURL(port) + "/hook"
	// the traffic is counted in the minute it is sampled in: from the
	// minute it starts in to the minute of the read, however long a loaded
	// machine takes in between
	start := time.Now()
	for i, key := range []string{"m1", "m2", "m3", "m2", "m3"} {
		if resp := minutesPost(t, url, `{"n":"`+key+`"}`, key); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %d: %s", i, resp.Status)
		}
	}
	if resp, _ := testkit.Post(t, url, []byte(`{"n":"forged"}`), "X-Sig", "00", "Idempotency-Key", "m4"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %s", resp.Status)
	}
	if resp := minutesPostTooLarge(t, url, `{"pad":"`+strings.Repeat("x", 2048)+`"}`, "m5"); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("too large: %s", resp.Status)
	}
	if resp, _ := testkit.Do(t, http.MethodGet, url, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %s", resp.Status)
	}

	read := func() minutesAnswer {
		t.Helper()
		var m minutesAnswer
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+src+"/minutes", &m)
		return m
	}
	before := time.Now()
	m := read()
	after := time.Now()
	if m.Source != src || m.StepSeconds != 60 || len(m.New) != 60 || len(m.Replayed) != 60 || len(m.Refused) != 60 || len(m.Failed) != 60 {
		t.Fatalf("answer: %+v", m)
	}
	// the hour ends with the minute of the read, which is between before
	// and after
	firstOf := func(at time.Time) time.Time { return at.Truncate(time.Minute).Add(-59 * time.Minute) }
	if m.From.Second() != 0 || m.From.Before(firstOf(before)) || m.From.After(firstOf(after)) {
		t.Fatalf("from %v, read between %v and %v", m.From, before, after)
	}
	if got := [4]int64{sumOf(m.New), sumOf(m.Replayed), sumOf(m.Refused), sumOf(m.Failed)}; got != [4]int64{3, 2, 2, 0} {
		t.Fatalf("new, replayed, refused, failed over the hour: %v, want [3 2 2 0]", got)
	}
	if sumOf(m.Results["invalid_signature"]) != 1 || sumOf(m.Results["too_large"]) != 1 {
		t.Fatalf("refusals by result: %v", m.Results)
	}
	if i := int(start.Truncate(time.Minute).Sub(m.From) / time.Minute); i < 0 || sumOf(m.New[i:]) != 3 {
		t.Fatalf("the deliveries are not in the minutes since %v: %v", start, m.New)
	}

	// the raw answer names the series as documented
	_, body := adminCall(t, c, http.MethodGet, "/webhook_idempotency/"+src+"/minutes")
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"source", "from", "step_seconds", "new", "replayed", "refused", "failed"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("no %q in %s", k, body)
		}
	}

	// a reload keeps the hour, and counts on
	if err := c.Reload(minutesSite(port, src, up)); err != nil {
		t.Fatal(err)
	}
	// the first request after a reload may meet the old listener closing
	// (testkit.PostAfterReload)
	if resp, _ := testkit.PostAfterReload(t, url, []byte(`{"n":"m6"}`), "X-Sig", minutesSig(`{"n":"m6"}`), "Idempotency-Key", "m6"); resp.StatusCode != http.StatusOK {
		t.Fatalf("after a reload: %s", resp.Status)
	}
	if m := read(); sumOf(m.New) != 4 || sumOf(m.Replayed) != 2 {
		t.Fatalf("after a reload: new %d, replayed %d, want 4 and 2", sumOf(m.New), sumOf(m.Replayed))
	}
	adminExpectError(t, c, http.MethodPost, "/webhook_idempotency/"+src+"/minutes", http.StatusMethodNotAllowed)
	adminExpectError(t, c, http.MethodGet, "/webhook_idempotency/nosuch/minutes", http.StatusNotFound)
}

// TestAdminMinutesWindows: the series read over the last hour, day and
// week count the same deliveries, in steps of a minute, five minutes and
// an hour; the application's answer time (an upstream that takes 30 ms)
// and the handling time around it are read as percentiles, null for a
// step without requests; another window is a 400.
func TestAdminMinutesWindows(t *testing.T) {
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		time.Sleep(30 * time.Millisecond)
	})
	port := testkit.FreePort(t)
	src := fmt.Sprintf("minutes_windows_%d", time.Now().UnixNano())
	c := testkit.StartCaddy(t, "", minutesSite(port, src, up))
	url := testkit.SiteURL(port) + "/hook"
	for i, key := range []string{"w1", "w2", "w3", "w1"} {
		if resp := minutesPost(t, url, `{"n":"`+key+`"}`, key); resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery %d: %s", i, resp.Status)
		}
	}
	for _, w := range []struct {
		name        string
		steps, step int
	}{{"", 60, 60}, {"1h", 60, 60}, {"24h", 288, 300}, {"7d", 168, 3600}} {
		var m minutesAnswer
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+src+"/minutes?window="+w.name, &m)
		if m.Window != cmp.Or(w.name, "1h") || m.StepSeconds != w.step || len(m.New) != w.steps || len(m.AppP50) != w.steps || len(m.HandlingP99) != w.steps {
			t.Fatalf("window %q: %s, step %d, %d steps", w.name, m.Window, m.StepSeconds, len(m.New))
		}
		if sumOf(m.New) != 3 || sumOf(m.Replayed) != 1 || sumOf(m.Results["new"]) != 3 || m.InboxBacklog != nil {
			t.Fatalf("window %q: new %d, replayed %d, results %v", w.name, sumOf(m.New), sumOf(m.Replayed), m.Results)
		}
		// the deliveries are in the last step, or the one before when a
		// step ended meanwhile
		if app, handling := maxOf(m.AppP50), maxOf(m.HandlingP99); app < 30*0.875 || handling < app {
			t.Fatalf("window %q: app p50 %v, handling p99 %v", w.name, app, handling)
		}
		if m.AppP50[0] != nil || m.HandlingP50[0] != nil {
			t.Fatalf("window %q: the first step has percentiles without requests", w.name)
		}
	}
	adminExpectError(t, c, http.MethodGet, "/webhook_idempotency/"+src+"/minutes?window=2h", http.StatusBadRequest)
}

// maxOf is the highest value of a list of percentiles, 0 for none.
func maxOf(ps []*float64) float64 {
	m := 0.0
	for _, p := range ps {
		if p != nil {
			m = max(m, *p)
		}
	}
	return m
}

// TestAdminMinutesInboxFailures: an inbox whose application keeps failing
// charts its attempts as failed (6 retries and a dead letter: 7), in its
// own series too, with its backlog while the event waited; the source's
// deliveries count them.
func TestAdminMinutesInboxFailures(t *testing.T) {
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, _ *http.Request, _ int64) {
		w.WriteHeader(http.StatusInternalServerError)
	})
	port := testkit.FreePort(t)
	src := fmt.Sprintf("minutes_inbox_%d", time.Now().UnixNano())
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		inbox {
			deliver_to %s
			retries 300ms 300ms 300ms 300ms 300ms 300ms
			jitter 0%%
			timeout 5s
		}
	}
}
`, port, src, app.URL))
	if resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(`{"n":1}`), "Idempotency-Key", "f1"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %s %s", resp.Status, b)
	}
	testkit.Eventually(t, 30*time.Second, "the dead letter counted", func() bool {
		var m minutesAnswer
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+src+"/minutes", &m)
		return sumOf(m.InboxDeadLettered) == 1
	})
	for _, window := range []string{"1h", "7d"} {
		var m minutesAnswer
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+src+"/minutes?window="+window, &m)
		if sumOf(m.New) != 1 || sumOf(m.Failed) != 7 || sumOf(m.InboxRetried) != 6 || sumOf(m.InboxDeadLettered) != 1 || sumOf(m.InboxDelivered) != 0 {
			t.Fatalf("%s: new %d, failed %d, retried %d, dead-lettered %d", window, sumOf(m.New), sumOf(m.Failed), sumOf(m.InboxRetried), sumOf(m.InboxDeadLettered))
		}
		if slices.Max(m.InboxBacklog) < 1 || slices.ContainsFunc(m.LagP50, func(p *float64) bool { return p != nil }) {
			t.Fatalf("%s: backlog %v, lag %v", window, m.InboxBacklog, m.LagP50)
		}
		var p50 int
		for _, p := range m.AppP50 {
			if p != nil {
				p50++
			}
		}
		if p50 == 0 {
			t.Fatalf("%s: no application time for 7 answered attempts", window)
		}
	}
	var st struct {
		Deliveries map[string]int64 `json:"deliveries"`
		Results    map[string]int64 `json:"results"`
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+src, &st)
	if st.Deliveries["retried"] != 6 || st.Deliveries["dead_lettered"] != 1 || st.Results["new"] != 1 {
		t.Fatalf("source: deliveries %v, results %v", st.Deliveries, st.Results)
	}
}
