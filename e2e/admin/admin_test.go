package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// These tests run a real Caddy with an inbox in front of a real upstream
// and a real Redis, and drive the admin API over HTTP.

const (
	metricInboxDeliveriesName = "caddy_webhook_idempotency_inbox_deliveries_total"
	metricInboxEventsName     = "caddy_webhook_idempotency_inbox_events"
)

// adminInboxSite is a site whose handler has an inbox for source,
// delivering to deliverTo, with a short retry schedule; its store calls
// and attempts have the time they take on a loaded machine (a store call
// or an attempt cut short would fail the request or spend a retry).
func adminInboxSite(port int, source, redisAddr, deliverTo, retries string) string {
	return fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		store redis redis://%s {
			timeout 5s
		}
		inbox {
			deliver_to %s
			retries %s
			jitter 0%%
			timeout 10s
		}
	}
}`, port, source, redisAddr, deliverTo, retries)
}

// adminCall sends a request to the admin API and returns the response
// and its body.
func adminCall(t *testing.T, c *testkit.Caddy, method, path string) (*http.Response, []byte) {
	t.Helper()
	return testkit.Do(t, method, c.AdminURL(path), nil)
}

// adminExpectError checks that a request answers status with Caddy's JSON
// error body.
func adminExpectError(t *testing.T, c *testkit.Caddy, method, path string, status int) *http.Response {
	t.Helper()
	resp, body := adminCall(t, c, method, path)
	if resp.StatusCode != status {
		t.Fatalf("%s %s: got %s, want %d: %s", method, path, resp.Status, status, body)
	}
	var e struct {
		Error string `json:"error"`
	}
	if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
		t.Fatalf("%s %s: want a JSON error, got %q (%v)", method, path, body, err)
	}
	return resp
}

// refusingApp is an application that answers every delivery 400, which
// the inbox dead-letters after one attempt.
func refusingApp(t *testing.T) *testkit.Upstream {
	return testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		w.WriteHeader(http.StatusBadRequest)
	})
}

// fixableApp is an application that answers 400 (a refusal the inbox
// dead-letters) while fixed is false, and 200 once it is true.
func fixableApp(t *testing.T, fixed *atomic.Bool) *testkit.Upstream {
	return testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if !fixed.Load() {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
}

// adminStatus is the JSON of one inbox's counts.
type adminStatus struct {
	Source    string `json:"source"`
	Pending   int64  `json:"pending"`
	Scheduled int64  `json:"scheduled"`
	Dead      int64  `json:"dead"`
}

// adminDead is the JSON of one dead-lettered event as the README documents it,
// written out apart from deadEvent so that a changed tag there fails here.
type adminDead struct {
	ID         string    `json:"id"`
	Key        string    `json:"key"`
	Method     string    `json:"method"`
	URI        string    `json:"uri"`
	Attempts   int       `json:"attempts"`
	LastStatus int       `json:"last_status"`
	LastError  string    `json:"last_error"`
	Received   time.Time `json:"received"`
	Failed     time.Time `json:"failed"`
}

// TestAdminDeadLetterAndRedeliver: a 400 from deliver_to dead-letters the
// event after one attempt; the admin API lists and counts it; once the
// application is fixed, a redelivery delivers the original request again
// and leaves nothing behind in Redis.
func TestAdminDeadLetterAndRedeliver(t *testing.T) {
	const source = "admin_redeliver"
	srv := testkit.StartRedis(t)
	var fixed atomic.Bool
	app := fixableApp(t, &fixed)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", adminInboxSite(port, source, srv.Addr(), app.URL+"/hook", "200ms 400ms"))
	before := c.Metrics(t)

	body := []byte(`{"id":"evt_1","type":"invoice.paid"}`)
	sent := time.Now()
	resp, b := testkit.Post(t, testkit.SiteURL(port)+"/in?x=1", body,
		"Idempotency-Key", "k-dead", "Content-Type", "application/json", "X-Provider-Signature", "sig-1")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %s: %s", resp.Status, b)
	}

	// dead-lettered after exactly one attempt
	var dead []adminDead
	testkit.Eventually(t, 10*time.Second, "the event to be dead-lettered", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/dead", &dead)
		return len(dead) > 0
	})
	if n := app.Calls.Load(); n != 1 {
		t.Fatalf("upstream got %d requests before the dead-letter, want 1", n)
	}
	if len(dead) != 1 {
		t.Fatalf("dead list: %+v", dead)
	}
	d := dead[0]
	if d.ID == "" || d.Key != "k-dead" || d.Method != http.MethodPost || d.URI != "/in?x=1" ||
		d.Attempts != 1 || d.LastStatus != http.StatusBadRequest {
		t.Fatalf("dead event: %+v", d)
	}
	testkit.MustContain(t, d.LastError, "400")
	if d.Received.Before(sent.Add(-time.Second)) || d.Received.After(time.Now()) ||
		d.Failed.Before(d.Received) || d.Failed.After(time.Now()) {
		t.Fatalf("dead event times: received %s, failed %s, sent %s", d.Received, d.Failed, sent)
	}

	var st adminStatus
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source, &st)
	if st != (adminStatus{Source: source, Dead: 1}) {
		t.Fatalf("counts: %+v", st)
	}
	var all []adminStatus
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/", &all)
	if len(all) != 1 || all[0] != st {
		t.Fatalf("list: %+v", all)
	}

	// the application is fixed: redeliver
	fixed.Store(true)
	var re struct {
		ID string `json:"id"`
	}
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/"+source+"/dead/"+d.ID+"/redeliver", &re)
	if _, ok := event.ParseID(re.ID); !ok || re.ID == d.ID {
		t.Fatalf("redeliver answered id %q (dead id %q)", re.ID, d.ID)
	}
	testkit.Eventually(t, 10*time.Second, "the redelivery", func() bool { return app.Calls.Load() >= 2 })
	reqs := app.Requests()
	got := reqs[1]
	if got.Method != http.MethodPost || string(got.Body) != string(body) ||
		got.Header.Get("Webhook-Attempt") != "2" || got.Header.Get("Idempotency-Key") != "k-dead" ||
		got.Header.Get("Content-Type") != "application/json" || got.Header.Get("X-Provider-Signature") != "sig-1" {
		t.Fatalf("redelivered request: %s %q %v", got.Method, got.Body, got.Header)
	}
	if reqs[0].Header.Get("Webhook-Attempt") != "1" {
		t.Fatalf("first attempt: %v", reqs[0].Header)
	}

	// nothing left: no dead event, an empty stream
	rc := srv.Client(t)
	testkit.Eventually(t, 10*time.Second, "the delivered event to leave the stream", func() bool {
		return rc.XLen(t.Context(), "{idem:"+source+"}:inbox").Val() == 0
	})
	if n := rc.XLen(t.Context(), "{idem:"+source+"}:dead").Val(); n != 0 {
		t.Fatalf("dead stream holds %d entries", n)
	}
	resp, b = adminCall(t, c, http.MethodGet, "/webhook_idempotency/"+source+"/dead")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("dead list after redelivery: %s: %s", resp.Status, b)
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source, &st)
	if st != (adminStatus{Source: source}) {
		t.Fatalf("counts after redelivery: %+v", st)
	}
	// a second redelivery of the same id finds nothing
	adminExpectError(t, c, http.MethodPost, "/webhook_idempotency/"+source+"/dead/"+d.ID+"/redeliver", http.StatusNotFound)
	if n := app.Calls.Load(); n != 2 {
		t.Fatalf("upstream got %d requests, want 2", n)
	}

	// the counters saw one dead-letter and one delivery
	after := c.Metrics(t)
	for outcome, want := range map[string]float64{"delivered": 1, "retried": 0, "dead_lettered": 1} {
		b, _ := before.Value(metricInboxDeliveriesName, "source", source, "outcome", outcome)
		a, _ := after.Value(metricInboxDeliveriesName, "source", source, "outcome", outcome)
		if a-b != want {
			t.Errorf("%s{outcome=%q} went from %v to %v, want +%v", metricInboxDeliveriesName, outcome, b, a, want)
		}
	}
}

// TestAdminInboxMetrics: after deliveries that succeed at once, succeed on
// a retry, are refused, and keep failing, the delivery counters and the
// event gauges agree with the admin API's counts.
func TestAdminInboxMetrics(t *testing.T) {
	const source = "admin_metrics"
	srv := testkit.StartRedis(t)
	var retryCalls atomic.Int64
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		switch r.Header.Get("Idempotency-Key") {
		case "ok":
			w.WriteHeader(http.StatusOK)
		case "retry": // fails once
			if retryCalls.Add(1) == 1 {
				w.WriteHeader(http.StatusInternalServerError)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		case "refuse":
			w.WriteHeader(http.StatusUnprocessableEntity)
		default: // "stuck": fails every time
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	})
	port := testkit.FreePort(t)
	// the second retry is far away: "stuck" waits for it, scheduled
	c := testkit.StartCaddy(t, "", adminInboxSite(port, source, srv.Addr(), app.URL, "200ms 1h"))
	before := c.Metrics(t)

	for _, key := range []string{"ok", "retry", "refuse", "stuck"} {
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/in", []byte(`{"k":"`+key+`"}`), "Idempotency-Key", key)
		if resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accept %s: %s: %s", key, resp.Status, b)
		}
	}

	// ok: 1 call; retry: 2; refuse: 1; stuck: 2, then scheduled for 1h
	want := adminStatus{Source: source, Scheduled: 1, Dead: 1}
	var st adminStatus
	testkit.Eventually(t, 10*time.Second, "the deliveries to settle", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source, &st)
		return st == want && app.Calls.Load() == 6
	})

	wantCounters := map[string]float64{"delivered": 2, "retried": 3, "dead_lettered": 1}
	wantGauges := map[string]float64{"pending": 0, "scheduled": 1, "dead": 1}
	var after testkit.Metrics
	testkit.Eventually(t, 10*time.Second, "the gauges to be refreshed", func() bool {
		after = c.Metrics(t)
		for state, w := range wantGauges {
			if v, ok := after.Value(metricInboxEventsName, "source", source, "state", state); !ok || v != w {
				return false
			}
		}
		return true
	})
	for outcome, w := range wantCounters {
		b, _ := before.Value(metricInboxDeliveriesName, "source", source, "outcome", outcome)
		a, _ := after.Value(metricInboxDeliveriesName, "source", source, "outcome", outcome)
		if a-b != w {
			t.Errorf("%s{outcome=%q} went from %v to %v, want +%v", metricInboxDeliveriesName, outcome, b, a, w)
		}
	}

	// the dead one is the refused event, after one attempt
	var dead []adminDead
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/dead", &dead)
	if len(dead) != 1 || dead[0].Key != "refuse" || dead[0].Attempts != 1 || dead[0].LastStatus != http.StatusUnprocessableEntity {
		t.Fatalf("dead list: %+v", dead)
	}
}

// TestAdminErrors: unknown sources, ids and paths answer 404, wrong methods
// 405 with Allow, bad paging parameters 400, and a Redis that is down 503;
// every error is Caddy's JSON error.
func TestAdminErrors(t *testing.T) {
	const source = "admin_errors"
	srv := testkit.StartRedis(t)
	app := refusingApp(t)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", adminInboxSite(port, source, srv.Addr(), app.URL, "200ms"))
	base := "/webhook_idempotency/" + source

	// an empty dead list is [], not null
	resp, b := adminCall(t, c, http.MethodGet, base+"/dead")
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "[]" {
		t.Fatalf("empty dead list: %s: %s", resp.Status, b)
	}

	// three dead events, for paging
	for i := range 3 {
		key := fmt.Sprintf("k%d", i)
		if resp, b := testkit.Post(t, testkit.SiteURL(port)+"/in", []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accept %s: %s: %s", key, resp.Status, b)
		}
	}
	var dead []adminDead
	testkit.Eventually(t, 10*time.Second, "three dead events", func() bool {
		c.AdminJSON(t, http.MethodGet, base+"/dead", &dead)
		return len(dead) == 3
	})
	var page []adminDead
	c.AdminJSON(t, http.MethodGet, base+"/dead?count=2", &page)
	if len(page) != 2 || page[0].ID != dead[0].ID || page[1].ID != dead[1].ID {
		t.Fatalf("first page: %+v, all: %+v", page, dead)
	}
	c.AdminJSON(t, http.MethodGet, base+"/dead?count=2&start="+dead[1].ID, &page)
	if len(page) != 2 || page[0].ID != dead[1].ID || page[1].ID != dead[2].ID {
		t.Fatalf("page from %s: %+v, all: %+v", dead[1].ID, page, dead)
	}

	// 404
	adminExpectError(t, c, http.MethodPost, base+"/dead/1-0/redeliver", http.StatusNotFound)
	adminExpectError(t, c, http.MethodPost, base+"/dead/not-an-id/redeliver", http.StatusNotFound)
	// the millisecond part alone of a dead event's id does not name it
	ms, _, _ := strings.Cut(dead[0].ID, "-")
	adminExpectError(t, c, http.MethodPost, base+"/dead/"+ms+"/redeliver", http.StatusNotFound)
	adminExpectError(t, c, http.MethodGet, "/webhook_idempotency/nope", http.StatusNotFound)
	adminExpectError(t, c, http.MethodGet, "/webhook_idempotency/nope/dead", http.StatusNotFound)
	adminExpectError(t, c, http.MethodPost, "/webhook_idempotency/nope/dead/"+dead[0].ID+"/redeliver", http.StatusNotFound)
	adminExpectError(t, c, http.MethodGet, base+"/alive", http.StatusNotFound)
	adminExpectError(t, c, http.MethodPost, base+"/dead/"+dead[0].ID+"/replay", http.StatusNotFound)

	// 405
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodGet, base + "/dead/" + dead[0].ID + "/redeliver", http.MethodPost},
		{http.MethodPost, base + "/dead", http.MethodGet},
		{http.MethodDelete, base, http.MethodGet},
		{http.MethodPost, "/webhook_idempotency/", http.MethodGet},
		{http.MethodPost, base + "/dead/" + dead[0].ID, "DELETE, GET"},
	} {
		resp := adminExpectError(t, c, tc.method, tc.path, http.StatusMethodNotAllowed)
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}

	// 400
	for _, q := range []string{"count=0", "count=1001", "count=x", "count=-1", "start=abc", "start=1-x", "start=1-"} {
		adminExpectError(t, c, http.MethodGet, base+"/dead?"+q, http.StatusBadRequest)
	}
	// nothing was redelivered by the failed calls
	c.AdminJSON(t, http.MethodGet, base+"/dead", &page)
	if len(page) != 3 {
		t.Fatalf("dead list after failed calls: %+v", page)
	}

	// Redis down: 503 for the source; the list of sources marks it
	// (e2e/redis: TestAdminSourceListSurvivesARedisOutage)
	srv.Kill()
	adminExpectError(t, c, http.MethodGet, base, http.StatusServiceUnavailable)
	adminExpectError(t, c, http.MethodGet, base+"/dead", http.StatusServiceUnavailable)
	adminExpectError(t, c, http.MethodPost, base+"/dead/"+dead[0].ID+"/redeliver", http.StatusServiceUnavailable)
}

// TestAdminDeadLetterOne: GET …/dead/<id> answers one dead letter as the
// list shows it, its attempts included, and 404 for an id that is none;
// DELETE on the same path still discards it.
func TestAdminDeadLetterOne(t *testing.T) {
	const source = "admin_dead_one"
	srv := testkit.StartRedis(t)
	app := refusingApp(t)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", adminInboxSite(port, source, srv.Addr(), app.URL+"/hook", "200ms"))

	resp, b := testkit.Post(t, testkit.SiteURL(port)+"/in", []byte(`{"id":"evt_1"}`),
		"Idempotency-Key", "k-one", "Content-Type", "application/json")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %s: %s", resp.Status, b)
	}
	var dead []adminDead
	testkit.Eventually(t, 10*time.Second, "the event to be dead-lettered", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source+"/dead", &dead)
		return len(dead) == 1
	})
	path := "/webhook_idempotency/" + source + "/dead/" + dead[0].ID

	resp, b = adminCall(t, c, http.MethodGet, path)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET %s: %s %q: %s", path, resp.Status, resp.Header.Get("Content-Type"), b)
	}
	var one struct {
		adminDead
		Body    string `json:"body"`
		History struct {
			Total    int `json:"total"`
			Attempts []struct {
				Attempt int `json:"attempt"`
				Status  int `json:"status"`
			} `json:"attempts"`
		} `json:"history"`
	}
	if err := json.Unmarshal(b, &one); err != nil {
		t.Fatalf("GET %s: %v: %s", path, err, b)
	}
	if one.adminDead != dead[0] || one.Body != `{"id":"evt_1"}` {
		t.Fatalf("GET %s: %+v, the list has %+v", path, one, dead[0])
	}
	if one.History.Total != 1 || len(one.History.Attempts) != 1 ||
		one.History.Attempts[0].Attempt != 1 || one.History.Attempts[0].Status != http.StatusBadRequest {
		t.Fatalf("GET %s: attempts %+v, want the one answered 400", path, one.History)
	}

	adminExpectError(t, c, http.MethodGet, "/webhook_idempotency/"+source+"/dead/1-0", http.StatusNotFound)
	adminExpectError(t, c, http.MethodGet, "/webhook_idempotency/"+source+"/dead/nonsense", http.StatusNotFound)

	resp, b = adminCall(t, c, http.MethodDelete, path)
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE %s: %s: %s", path, resp.Status, b)
	}
	adminExpectError(t, c, http.MethodGet, path, http.StatusNotFound)
}
