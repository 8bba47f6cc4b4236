package admin

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
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

// sumOf adds a series up.
func sumOf(v []int64) (n int64) {
	for _, x := range v {
		n += x
	}
	return n
}

// TestAdminMinutes: GET /webhook_idempotency/<source>/minutes answers the
// last hour of the source's results a minute at a time, from real traffic:
// new, replayed, invalid signatures and failed deliveries (here a body
// over max_body); a request that is no delivery (a GET, skipped) is not
// counted. The history survives a reload.
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
	if resp := minutesPost(t, url, `{"pad":"`+strings.Repeat("x", 2048)+`"}`, "m5"); resp.StatusCode != http.StatusRequestEntityTooLarge {
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
	if m.Source != src || m.StepSeconds != 60 || len(m.New) != 60 || len(m.Replayed) != 60 || len(m.Invalid) != 60 || len(m.Failed) != 60 {
		t.Fatalf("answer: %+v", m)
	}
	// the hour ends with the minute of the read, which is between before
	// and after
	firstOf := func(at time.Time) time.Time { return at.Truncate(time.Minute).Add(-59 * time.Minute) }
	if m.From.Second() != 0 || m.From.Before(firstOf(before)) || m.From.After(firstOf(after)) {
		t.Fatalf("from %v, read between %v and %v", m.From, before, after)
	}
	if got := [4]int64{sumOf(m.New), sumOf(m.Replayed), sumOf(m.Invalid), sumOf(m.Failed)}; got != [4]int64{3, 2, 1, 1} {
		t.Fatalf("new, replayed, invalid, failed over the hour: %v, want [3 2 1 1]", got)
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
	for _, k := range []string{"source", "from", "step_seconds", "new", "replayed", "invalid", "failed"} {
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
