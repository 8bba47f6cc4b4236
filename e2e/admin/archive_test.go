package admin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// These tests drive every row of the admin API over HTTP against a real
// Caddy, real upstreams and a real Redis.

// adminSource is the JSON of one source.
type adminSourceJSON struct {
	Source    string           `json:"source"`
	Store     string           `json:"store"`
	Routes    int              `json:"routes"`
	Results   map[string]int64 `json:"results"`
	Inbox     bool             `json:"inbox"`
	Pending   *int64           `json:"pending"`
	Scheduled *int64           `json:"scheduled"`
	Dead      *int64           `json:"dead"`
	Archive   *struct {
		Events      int64  `json:"events"`
		MaxEvents   int    `json:"max_events"`
		RedeliverTo string `json:"redeliver_to"`
	} `json:"archive"`
}

type adminKeyJSON struct {
	Source      string     `json:"source"`
	Key         string     `json:"key"`
	StoreKey    string     `json:"store_key"`
	State       string     `json:"state"`
	LeaseLeftMs *int64     `json:"lease_left_ms"`
	Status      int        `json:"status"`
	RecordedAt  *time.Time `json:"recorded_at"`
	ExpiresAt   *time.Time `json:"expires_at"`
}

type adminEventsJSON struct {
	Events []archive.Event `json:"events"`
	Cursor string          `json:"cursor"`
}

func eventKeys(evs []archive.Event) string {
	var keys []string
	for _, ev := range evs {
		keys = append(keys, ev.Key+"/"+ev.Result)
	}
	return strings.Join(keys, " ")
}

// TestAdminKeysAndArchive: sources with their counts; a key absent, in
// flight and completed; forgetting a key (and the next retry processed);
// the archive searched, paged, fetched whole, exported and redelivered to
// redeliver_to; every error of these routes.
func TestAdminKeysAndArchive(t *testing.T) {
	srv := testkit.StartRedis(t)
	release := make(chan struct{})
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/slow"):
			<-release
		case strings.HasPrefix(r.URL.Path, "/fail"):
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	redo := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) { w.WriteHeader(http.StatusAccepted) })
	port := testkit.FreePort(t)
	sites := fmt.Sprintf(`
http://127.0.0.1:%d {
	handle /plain* {
		webhook_idempotency {
			source adm_plain
			store memory
		}
		reverse_proxy %s
	}
	handle /noredo* {
		webhook_idempotency {
			source adm_noredo
			archive
		}
		reverse_proxy %s
	}
	handle {
		webhook_idempotency {
			source adm
			store redis redis://%s {
				timeout 2s
			}
			archive 1d {
				redeliver_to %s/redo
			}
		}
		reverse_proxy %s
	}
}`, port, app.Addr(), app.Addr(), srv.Addr(), redo.URL, app.Addr())
	c := testkit.StartCaddy(t, "", sites)
	site := testkit.SiteURL(port)

	send := func(path, key, body string) *http.Response {
		resp, b := testkit.Post(t, site+path, []byte(body), "Idempotency-Key", key, "Content-Type", "application/json", "X-Trace", "t-"+key)
		if resp.StatusCode >= 500 && !strings.HasPrefix(path, "/fail") {
			t.Fatalf("%s %s: %s %s", path, key, resp.Status, b)
		}
		return resp
	}
	send("/hook", "k1", `{"n":1}`)
	if resp := send("/hook", "k1", `{"n":1}`); resp.Header.Get(record.ReplayedHeader) != "true" {
		t.Fatal("no replay")
	}
	send("/fail", "k2", `{"n":2}`)
	send("/plain", "p1", `{"p":1}`)
	// a delivery in flight
	slowDone := make(chan struct{})
	var slowErr error // checked on the test's goroutine
	go func() {
		defer close(slowDone)
		req, _ := http.NewRequest(http.MethodPost, site+"/slow", strings.NewReader(`{"n":3}`))
		req.Header.Set("Idempotency-Key", "k3")
		resp, err := testkit.Client.Do(req)
		if err != nil {
			slowErr = err
			return
		}
		_, slowErr = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}()
	var inflight adminKeyJSON
	testkit.Eventually(t, 10*time.Second, "k3 in flight", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/keys/k3", &inflight)
		return inflight.State == "in_flight"
	})
	if inflight.LeaseLeftMs == nil || *inflight.LeaseLeftMs <= 0 || *inflight.LeaseLeftMs > 30000 || inflight.StoreKey != "idem:adm:k3" {
		t.Fatalf("in flight: %+v", inflight)
	}
	adminExpectError(t, c, http.MethodDelete, "/webhook_idempotency/adm/keys/k3", http.StatusConflict)
	close(release)
	<-slowDone
	if slowErr != nil {
		t.Fatalf("the delivery of k3: %v", slowErr)
	}

	// sources
	var all []adminSourceJSON
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/", &all)
	if len(all) != 3 || all[0].Source != "adm" || all[1].Source != "adm_noredo" || all[2].Source != "adm_plain" {
		t.Fatalf("sources: %+v", all)
	}
	adm := all[0]
	if adm.Store != "redis" || adm.Routes != 1 || adm.Inbox || adm.Pending != nil || adm.Archive == nil ||
		adm.Archive.MaxEvents != 1_000_000 || adm.Archive.RedeliverTo != redo.URL+"/redo" ||
		adm.Results["new"] < 3 || adm.Results["replayed"] < 1 {
		t.Fatalf("adm: %+v", adm)
	}
	if all[2].Store != "memory" || all[2].Archive != nil || all[2].Results["new"] < 1 {
		t.Fatalf("adm_plain: %+v", all[2])
	}
	var one adminSourceJSON
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm", &one)
	if one.Source != "adm" || one.Archive == nil {
		t.Fatalf("one source: %+v", one)
	}
	testkit.Eventually(t, 10*time.Second, "four archived events", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm", &one)
		return one.Archive.Events == 4
	})

	// keys
	var k adminKeyJSON
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/keys/k1", &k)
	if k.State != "completed" || k.Status != 200 || k.RecordedAt == nil || k.ExpiresAt == nil ||
		time.Since(*k.RecordedAt) > time.Minute || time.Since(*k.RecordedAt) < -time.Second ||
		k.ExpiresAt.Sub(*k.RecordedAt) != 24*time.Hour {
		t.Fatalf("completed key: %+v", k)
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/keys/k2", &k)
	if k.State != "absent" || k.Key != "k2" {
		t.Fatalf("released key: %+v", k)
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm_plain/keys/p1", &k)
	if k.State != "completed" || k.Status != 200 {
		t.Fatalf("memory key: %+v", k)
	}
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/keys/"+url.PathEscape("a/b c"), &k)
	if k.State != "absent" || k.Key != "a/b c" || k.StoreKey != "idem:adm:a/b c" {
		t.Fatalf("escaped key: %+v", k)
	}
	// forget: the next retry is processed
	calls := app.Calls.Load()
	c.Forget(t, "adm", "k1")
	adminExpectError(t, c, http.MethodDelete, "/webhook_idempotency/adm/keys/k1", http.StatusNotFound)
	if resp := send("/hook", "k1", `{"n":1}`); resp.Header.Get(record.ReplayedHeader) != "" || app.Calls.Load() != calls+1 {
		t.Fatalf("the retry after forget was not processed: %v, %d calls", resp.Header, app.Calls.Load()-calls)
	}
	c.Forget(t, "adm_plain", "p1") // on the memory store

	// the archive, newest first
	var list adminEventsJSON
	testkit.Eventually(t, 10*time.Second, "five archived events", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/events", &list)
		return len(list.Events) == 5
	})
	if got := eventKeys(list.Events); got != "k1/new k3/new k2/new k1/replayed k1/new" || list.Cursor != "" {
		t.Fatalf("events: %s, cursor %q", got, list.Cursor)
	}
	if list.Events[0].Headers != nil || list.Events[0].Body != nil || !list.Events[0].BodyStored {
		t.Fatalf("a listed event carries headers or body: %+v", list.Events[0])
	}
	for q, want := range map[string]string{
		"key=k1":            "k1/new k1/replayed k1/new",
		"result=replayed":   "k1/replayed",
		"status=5xx":        "k2/new",
		"status=500":        "k2/new",
		"key=k1&result=new": "k1/new k1/new",
		"since=1h":          "k1/new k3/new k2/new k1/replayed k1/new",
		"until=" + time.Now().Add(-time.Hour).UTC().Format(time.RFC3339): "",
		"key=nope": "",
	} {
		var l adminEventsJSON
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/events?"+q, &l)
		if got := eventKeys(l.Events); got != want {
			t.Errorf("?%s: %s, want %s", q, got, want)
		}
	}
	// paging
	var page adminEventsJSON
	var paged []archive.Event
	for path := "/webhook_idempotency/adm/events?count=2"; ; {
		c.AdminJSON(t, http.MethodGet, path, &page)
		paged = append(paged, page.Events...)
		if page.Cursor == "" {
			break
		}
		path = "/webhook_idempotency/adm/events?count=2&cursor=" + page.Cursor
	}
	if eventKeys(paged) != eventKeys(list.Events) {
		t.Fatalf("paged: %s", eventKeys(paged))
	}
	// one event, whole
	first := list.Events[len(list.Events)-1]
	var ev archive.Event
	c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/adm/events/"+first.ID, &ev)
	if ev.Body == nil || *ev.Body != `{"n":1}` || ev.Headers["X-Trace"][0] != "t-k1" || ev.Status != 200 || ev.URI != "/hook" {
		t.Fatalf("event: %+v", ev)
	}
	// export
	resp, b := adminCall(t, c, http.MethodGet, "/webhook_idempotency/adm/events/export?key=k1")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export: %s %v", resp.Status, resp.Header)
	}
	var exported []archive.Event
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		var e archive.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("export line %q: %v", sc.Text(), err)
		}
		exported = append(exported, e)
	}
	if eventKeys(exported) != "k1/new k1/replayed k1/new" || exported[2].Body == nil || *exported[2].Body != `{"n":1}` {
		t.Fatalf("exported: %s", b)
	}

	// redeliver one to redeliver_to
	var out redeliveryOutcome
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/adm/events/"+first.ID+"/redeliver", &out)
	if !out.Delivered || out.Status != http.StatusAccepted || out.ID != first.ID {
		t.Fatalf("redeliver: %+v", out)
	}
	got := redo.Requests()
	if len(got) != 1 || string(got[0].Body) != `{"n":1}` || got[0].URI != "/redo" || got[0].Header.Get("X-Trace") != "t-k1" ||
		got[0].Header.Get("Idempotency-Key") != "k1" || got[0].Header.Get("X-Forwarded-For") != "127.0.0.1" {
		t.Fatalf("redelivered request: %+v", got)
	}
	// a replay has no body to redeliver
	adminExpectError(t, c, http.MethodPost, "/webhook_idempotency/adm/events/"+list.Events[3].ID+"/redeliver", http.StatusConflict)
	// a filtered set: one per key, oldest first
	var set struct {
		Redelivered []redeliveryOutcome `json:"redelivered"`
		Skipped     []redeliveryOutcome `json:"skipped"`
	}
	c.AdminJSON(t, http.MethodPost, "/webhook_idempotency/adm/events/redeliver?since=1h", &set)
	if len(set.Redelivered) != 3 || len(set.Skipped) != 2 || set.Redelivered[0].Key != "k2" || set.Redelivered[2].Key != "k1" {
		t.Fatalf("redelivered set: %+v", set)
	}
	if n := len(redo.Requests()); n != 4 {
		t.Fatalf("redeliver_to got %d requests, want 4", n)
	}

	// errors
	for _, tc := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/webhook_idempotency/nope", 404},
		{http.MethodGet, "/webhook_idempotency/nope/keys/k", 404},
		{http.MethodGet, "/webhook_idempotency/adm/keys", 400}, // keys?key=<key> without a key
		{http.MethodDelete, "/webhook_idempotency/adm/keys?key=", 400},
		{http.MethodGet, "/webhook_idempotency/adm/keys/a/b", 404},
		{http.MethodGet, "/webhook_idempotency/adm/events/1-0", 404},
		{http.MethodGet, "/webhook_idempotency/adm/events/not-an-id", 404},
		{http.MethodPost, "/webhook_idempotency/adm/events/1-0/redeliver", 404},
		{http.MethodGet, "/webhook_idempotency/adm_plain/events", 404},
		{http.MethodGet, "/webhook_idempotency/adm_plain/dead", 404},
		{http.MethodGet, "/webhook_idempotency/adm/dead", 404},
		{http.MethodPost, "/webhook_idempotency/adm_noredo/events/redeliver?key=x", 409},
		{http.MethodPost, "/webhook_idempotency/adm/events/redeliver", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?result=bogus", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?status=abc", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?status=600", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?since=yesterday", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?count=0", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?count=1001", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events?cursor=zz", 400},
		{http.MethodGet, "/webhook_idempotency/adm/events/export?status=x", 400},
		{http.MethodPut, "/webhook_idempotency/adm/keys/k1", 405},
		{http.MethodPost, "/webhook_idempotency/adm/events", 405},
		{http.MethodGet, "/webhook_idempotency/adm/events/redeliver", 405},
		{http.MethodDelete, "/webhook_idempotency/adm/events/" + first.ID, 405},
		{http.MethodPost, "/webhook_idempotency/console", 405},
	} {
		resp := adminExpectError(t, c, tc.method, tc.path, tc.status)
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, ct)
		}
		if tc.status == 405 && resp.Header.Get("Allow") == "" {
			t.Errorf("%s %s: no Allow", tc.method, tc.path)
		}
	}
	if resp := adminExpectError(t, c, http.MethodPatch, "/webhook_idempotency/adm/keys/k1", 405); resp.Header.Get("Allow") != "DELETE, GET" {
		t.Errorf("Allow %q", resp.Header.Get("Allow"))
	}

	// Redis down: 503 (the list of every source marks the source instead:
	// e2e/redis, TestAdminSourceListSurvivesARedisOutage)
	srv.Kill()
	for _, p := range []string{"/webhook_idempotency/adm", "/webhook_idempotency/adm/keys/k1",
		"/webhook_idempotency/adm/events", "/webhook_idempotency/adm/events/" + first.ID} {
		adminExpectError(t, c, http.MethodGet, p, http.StatusServiceUnavailable)
	}
	adminExpectError(t, c, http.MethodDelete, "/webhook_idempotency/adm/keys/k1", http.StatusServiceUnavailable)
}

// TestAdminArchiveToInboxAndDeadLetters: on an inbox route, an archived
// event is redelivered through the inbox (a fresh delivery); dead letters
// are discarded one by one and redelivered all at once.
func TestAdminArchiveToInboxAndDeadLetters(t *testing.T) {
	const source = "adm_inbox"
	srv := testkit.StartRedis(t)
	var fixed atomic.Bool
	fixed.Store(true)
	app := fixableApp(t, &fixed)
	port := testkit.FreePort(t)
	site := strings.Replace(adminInboxSite(port, source, srv.Addr(), app.URL+"/in", "200ms"),
		"\t\tinbox {", "\t\tarchive {\n\t\t\tredact header:X-Secret\n\t\t}\n\t\tinbox {", 1)
	c := testkit.StartCaddy(t, "", site)
	base := "/webhook_idempotency/" + source

	if resp, b := testkit.Post(t, testkit.SiteURL(port)+"/w", []byte(`{"a":1}`), "Idempotency-Key", "i1", "X-Secret", "s3", "X-Plain", "p"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("accept: %s %s", resp.Status, b)
	}
	testkit.Eventually(t, 10*time.Second, "the delivery", func() bool { return app.Calls.Load() == 1 })
	var list adminEventsJSON
	testkit.Eventually(t, 10*time.Second, "the archived event", func() bool {
		c.AdminJSON(t, http.MethodGet, base+"/events", &list)
		return len(list.Events) == 1
	})
	if ev := list.Events[0]; ev.Result != results.New || ev.Status != http.StatusAccepted || ev.Key != "i1" {
		t.Fatalf("archived: %+v", ev)
	}
	var out redeliveryOutcome
	c.AdminJSON(t, http.MethodPost, base+"/events/"+list.Events[0].ID+"/redeliver", &out)
	if !out.Delivered || out.InboxID == "" {
		t.Fatalf("redeliver: %+v", out)
	}
	testkit.Eventually(t, 10*time.Second, "the redelivery", func() bool { return app.Calls.Load() == 2 })
	got := app.Requests()[1]
	if string(got.Body) != `{"a":1}` || got.Header.Get("Webhook-Attempt") != "1" || got.Header.Get("X-Plain") != "p" ||
		got.Header.Get("X-Secret") != "" || got.Header.Get("Idempotency-Key") != "i1" {
		t.Fatalf("redelivered through the inbox: %q %v", got.Body, got.Header)
	}

	// dead letters: discard one, redeliver the rest at once
	fixed.Store(false)
	for i := range 3 {
		key := fmt.Sprintf("d%d", i)
		if resp, _ := testkit.Post(t, testkit.SiteURL(port)+"/w", []byte(key), "Idempotency-Key", key); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("accept %s: %s", key, resp.Status)
		}
	}
	var dead []adminDead
	testkit.Eventually(t, 10*time.Second, "three dead letters", func() bool {
		c.AdminJSON(t, http.MethodGet, base+"/dead", &dead)
		return len(dead) == 3
	})
	if resp, b := adminCall(t, c, http.MethodDelete, base+"/dead/"+dead[0].ID); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("discard: %s %s", resp.Status, b)
	}
	discarded := dead[0].Key // the inbox fails the three side by side: any may be first
	adminExpectError(t, c, http.MethodDelete, base+"/dead/"+dead[0].ID, http.StatusNotFound)
	adminExpectError(t, c, http.MethodDelete, base+"/dead/123", http.StatusNotFound)
	fixed.Store(true)
	calls := app.Calls.Load()
	var all struct {
		Redelivered int `json:"redelivered"`
	}
	c.AdminJSON(t, http.MethodPost, base+"/dead/redeliver", &all)
	if all.Redelivered != 2 {
		t.Fatalf("redelivered %d", all.Redelivered)
	}
	testkit.Eventually(t, 10*time.Second, "two redeliveries", func() bool { return app.Calls.Load() == calls+2 })
	c.AdminJSON(t, http.MethodGet, base+"/dead", &dead)
	if len(dead) != 0 {
		t.Fatalf("dead after redeliver all: %+v", dead)
	}
	redelivered := map[string]bool{}
	for _, r := range app.Requests()[calls:] {
		k := r.Header.Get("Idempotency-Key")
		if k == discarded || !strings.HasPrefix(k, "d") || redelivered[k] {
			t.Fatalf("redelivered %q (discarded %q, redelivered before: %v)", k, discarded, redelivered)
		}
		redelivered[k] = true
	}
}
