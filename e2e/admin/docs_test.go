package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// docShape is a JSON shape of docs/admin.md: each documented field name
// and the text of its row.
type docShape map[string]string

// docShapes reads the tables under "## JSON shapes" in docs/admin.md, one
// shape per "### <name>" heading.
func docShapes(t *testing.T) map[string]docShape {
	t.Helper()
	text := testkit.ReadFile(t, "../../docs/admin.md")
	start := strings.Index(text, "\n## JSON shapes\n")
	if start < 0 {
		t.Fatal("docs/admin.md has no JSON shapes section")
	}
	text = text[start+1:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	names := regexp.MustCompile("`([a-z][a-z_0-9]*)`")
	shapes := map[string]docShape{}
	var cur docShape
	for _, line := range strings.Split(text, "\n") {
		if name, ok := strings.CutPrefix(line, "### "); ok {
			cur = docShape{}
			shapes[name] = cur
			continue
		}
		if cur == nil || !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(line, "|")
		for _, m := range names.FindAllStringSubmatch(cells[1], -1) {
			cur[m[1]] = line
		}
	}
	return shapes
}

// mapFields are fields whose members are names of the data (results by
// result name, headers by header name), not fields of a shape.
var mapFields = map[string]bool{"results": true, "headers": true}

// listShapes are the fields that hold a list of another shape.
var listShapes = map[string]string{"events": "event", "redelivered": "redelivery", "skipped": "redelivery", "allow_ips": "allow list", "destinations": "destination", "attempts": "attempt"}

// objectShapes are the fields that hold an object of another shape.
var objectShapes = map[string]string{"breaker": "breaker", "history": "history"}

// shapeChecker checks answers against the documented shapes and records
// which documented fields were seen.
type shapeChecker struct {
	t      *testing.T
	shapes map[string]docShape
	seen   map[string]map[string]bool
}

// check checks that every field of an answer of a shape is documented
// there (and every member of an object field named in its row).
func (c *shapeChecker) check(shape, where string, obj map[string]any) {
	c.t.Helper()
	doc, ok := c.shapes[shape]
	if !ok {
		c.t.Fatalf("docs/admin.md documents no %q shape", shape)
	}
	if c.seen[shape] == nil {
		c.seen[shape] = map[string]bool{}
	}
	for k, v := range obj {
		row, ok := doc[k]
		if !ok {
			c.t.Errorf("%s: field %q of the %s answer is not documented in docs/admin.md's %s table", where, k, shape, shape)
			continue
		}
		c.seen[shape][k] = true
		switch v := v.(type) {
		case map[string]any:
			if mapFields[k] {
				continue
			}
			if inner, ok := objectShapes[k]; ok {
				c.check(inner, where+" "+k, v)
				continue
			}
			for sub := range v {
				if !strings.Contains(row, "`"+sub+"`") {
					c.t.Errorf("%s: field %s.%s of the %s answer is not documented in the row of %q", where, k, sub, shape, k)
				}
			}
		case []any:
			if inner, ok := listShapes[k]; ok && shape != "minutes" {
				for _, e := range v {
					c.check(inner, where+" "+k, e.(map[string]any))
				}
			}
		}
	}
}

// get answers the admin API's JSON at path, which must answer status.
func (c *shapeChecker) get(caddy *testkit.Caddy, method, path string, status int) []byte {
	c.t.Helper()
	resp, body := testkit.Do(c.t, method, caddy.AdminURL(path), nil)
	if resp.StatusCode != status {
		c.t.Fatalf("%s %s: %s, want %d: %s", method, path, resp.Status, status, body)
	}
	return body
}

func decodeObject(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return m
}

func decodeList(t *testing.T, b []byte) []map[string]any {
	t.Helper()
	var l []map[string]any
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return l
}

// TestAdminAnswersAsDocumented: the answers of every admin API route, read
// from a real Caddy with real traffic (the file store, an archive with
// redeliver_to, an inbox that dead-letters, Caddy's tracing and the
// global trace_url), have the fields docs/admin.md documents, under the
// same names, and every documented field but those this setup cannot
// produce is seen.
func TestAdminAnswersAsDocumented(t *testing.T) {
	testkit.Traces(t)
	app := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.HasPrefix(r.URL.Path, "/refuse") {
			// an answer kept cut (keep_response 200), and not UTF-8
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(append([]byte{0xff, 0xfe}, strings.Repeat("no", 150)...))
			return
		}
		if r.URL.Path == "/down" {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path == "/ips" {
			fmt.Fprintln(w, "127.0.0.1")
			return
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port, closed := testkit.FreePort(t), testkit.FreePort(t)
	down := fmt.Sprintf("http://127.0.0.1:%d/down", closed) // nothing listens: no answer
	// the inbox has a route, whose destination is down and whose breaker
	// opens on its first failure
	sites := func(inboxPolicy string) string {
		return fmt.Sprintf(`http://127.0.0.1:%[1]d {
	handle /archive {
		tracing
		webhook_idempotency {
			source docs_archive
			archive {
				redeliver_to %[2]s/again
			}
		}
		reverse_proxy %[3]s
	}
	handle /signed {
		webhook_idempotency stripe {
			source docs_signed
			secret whsec_docs
		}
		reverse_proxy %[3]s
	}
	handle /allowed {
		webhook_idempotency {
			source docs_allowed
			allow_ips 127.0.0.1 url %[2]s/ips
		}
		reverse_proxy %[3]s
	}
	handle /batch {
		webhook_idempotency {
			source docs_batch
			batch json:items {
				key json:id
			}
			archive
		}
		reverse_proxy %[3]s
	}
	handle /inbox {
		tracing
		webhook_idempotency {
			source docs_inbox
			archive
			keep_response 200
			inbox {
				deliver_to %[2]s/refuse
				retries 100ms
				jitter 0%%
				timeout 1s
				breaker 50%% of 1 cooldown 10m
				%[4]s
			}
		}
	}
}
`, port, app.URL, app.Addr(), inboxPolicy)
	}
	route := "route json:down=* " + down
	c := testkit.StartCaddy(t, "webhook_idempotency {\n\t\ttrace_url https://traces.example/{trace_id}\n\t}", sites(route))
	site := testkit.SiteURL(port)
	for _, d := range []struct{ key, body string }{{"k1", `{"a":1}`}, {"k2", "\xff\xfe not utf-8"}, {"k1", `{"a":1}`}} {
		if resp, b := testkit.Post(t, site+"/archive", []byte(d.body), "Idempotency-Key", d.key); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", d.key, resp.Status, b)
		}
	}
	if resp, b := testkit.Post(t, site+"/inbox", []byte(`{"b":1}`), "Idempotency-Key", "i1"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("inbox: %s %s", resp.Status, b)
	}
	if resp, b := testkit.Post(t, site+"/inbox", []byte(`{"down":1}`), "Idempotency-Key", "i2"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("inbox: %s %s", resp.Status, b)
	}
	if resp, b := testkit.Post(t, site+"/inbox", []byte("\xff\xfe not utf-8"), "Idempotency-Key", "i3"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("inbox: %s %s", resp.Status, b)
	}
	if resp, b := testkit.Post(t, site+"/batch", []byte(`{"items":[{"id":"b1"},{"id":"b2"}]}`)); resp.StatusCode != http.StatusOK {
		t.Fatalf("batch: %s %s", resp.Status, b)
	}
	testkit.Eventually(t, 10*time.Second, "the dead letters, and the route's breaker open", func() bool {
		var dead []map[string]any
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/docs_inbox/dead", &dead)
		var src struct {
			Destinations []struct {
				Breaker struct {
					State string `json:"state"`
				} `json:"breaker"`
			} `json:"destinations"`
		}
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/docs_inbox", &src)
		return len(dead) == 2 && len(src.Destinations) == 2 && src.Destinations[1].Breaker.State == "open"
	})

	// a refusal: a delivery without its signature
	if resp, b := testkit.Post(t, site+"/signed", []byte(`{"id":"evt_1"}`)); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unsigned: %s %s, want 401", resp.Status, b)
	}
	testkit.Eventually(t, 10*time.Second, "the refusal listed", func() bool {
		var l map[string]any
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/docs_signed/refused", &l)
		r, _ := l["refused"].([]any)
		return len(r) == 1
	})

	sc := &shapeChecker{t: t, shapes: docShapes(t), seen: map[string]map[string]bool{}}
	sc.check("refusal list", "GET refused", decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_signed/refused", 200)))
	dest := url.Values{"destination": {down}}.Encode()
	pause := decodeObject(t, sc.get(c, http.MethodPost, "/webhook_idempotency/docs_inbox/pause?"+dest, 200))
	sc.check("pause", "POST pause?destination=", pause)
	if pause["paused"] != true || pause["destination"] != down {
		t.Errorf("POST pause?destination=: %v", pause)
	}
	sc.check("pause", "POST resume", decodeObject(t, sc.get(c, http.MethodPost, "/webhook_idempotency/docs_inbox/resume", 200)))
	for _, s := range decodeList(t, sc.get(c, http.MethodGet, "/webhook_idempotency/", 200)) {
		sc.check("source", "GET /", s)
	}
	for _, src := range []string{"docs_archive", "docs_inbox", "docs_allowed"} {
		sc.check("source", "GET /"+src, decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/"+src, 200)))
		sc.check("minutes", "GET minutes", decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/"+src+"/minutes", 200)))
	}
	sc.check("key", "GET key", decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_archive/keys/k1", 200)))
	sc.check("key", "GET absent key", decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_archive/keys/nope", 200)))
	sc.check("key", "GET key (inbox)", decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_inbox/keys/i2", 200)))
	batches := decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_batch/events", 200))
	sc.check("event list", "GET events (batch)", batches)
	if evs, _ := batches["events"].([]any); len(evs) != 1 || evs[0].(map[string]any)["items"] == nil {
		t.Errorf("a batch's event: %v, want its items", batches)
	}

	list := decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_archive/events", 200))
	sc.check("event list", "GET events", list)
	var ids []string
	for _, e := range list["events"].([]any) {
		ev := e.(map[string]any)
		ids = append(ids, ev["id"].(string))
		for _, whole := range []string{"headers", "body", "body_encoding"} {
			if _, ok := ev[whole]; ok {
				t.Errorf("the event list has %q, which docs/admin.md says only a whole event has", whole)
			}
		}
		sc.check("event", "GET events/<id>", decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_archive/events/"+ev["id"].(string), 200)))
	}
	for _, line := range bytes.Split(bytes.TrimSpace(sc.get(c, http.MethodGet, "/webhook_idempotency/docs_archive/events/export", 200)), []byte("\n")) {
		sc.check("event", "GET events/export", decodeObject(t, line))
	}
	newest := ids[len(ids)-1] // the oldest: k1's first delivery, with its body
	sc.check("redelivery", "POST events/<id>/redeliver", decodeObject(t, sc.get(c, http.MethodPost, "/webhook_idempotency/docs_archive/events/"+newest+"/redeliver", 200)))
	sc.check("redelivered set", "POST events/redeliver", decodeObject(t, sc.get(c, http.MethodPost, "/webhook_idempotency/docs_archive/events/redeliver?"+url.Values{"key": {"k1"}}.Encode(), 200)))
	// through the inbox: an inbox_id
	inboxList := decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_inbox/events", 200))
	sc.check("event list", "GET events (inbox)", inboxList)
	inboxEvents := inboxList["events"].([]any)
	sc.check("redelivery", "POST events/<id>/redeliver (inbox)", decodeObject(t, sc.get(c, http.MethodPost,
		"/webhook_idempotency/docs_inbox/events/"+inboxEvents[0].(map[string]any)["id"].(string)+"/redeliver", 200)))

	dead := decodeList(t, sc.get(c, http.MethodGet, "/webhook_idempotency/docs_inbox/dead", 200))
	for _, d := range dead {
		sc.check("dead letter", "GET dead", d)
		sc.check("dead letter", "GET dead/<id>", decodeObject(t, sc.get(c, http.MethodGet,
			"/webhook_idempotency/docs_inbox/dead/"+d["id"].(string)+"?destination="+url.QueryEscape(d["destination"].(string)), 200)))
	}
	if m := decodeObject(t, sc.get(c, http.MethodPost, "/webhook_idempotency/docs_inbox/dead/"+dead[0]["id"].(string)+"/redeliver", 200)); len(m) != 1 || m["id"] == nil {
		t.Errorf("POST dead/<id>/redeliver: %v, docs say {\"id\":…}", m)
	}
	if m := decodeObject(t, sc.get(c, http.MethodPost, "/webhook_idempotency/docs_inbox/dead/redeliver", 200)); len(m) != 1 || m["redelivered"] == nil {
		t.Errorf("POST dead/redeliver: %v, docs say {\"redelivered\":…}", m)
	}
	if m := decodeObject(t, sc.get(c, http.MethodGet, "/webhook_idempotency/nosuch", 404)); len(m) != 1 || m["error"] == nil {
		t.Errorf("an error: %v, docs say {\"error\":…}", m)
	}
	// a reload without the route: its destination, whose queue still
	// holds the event, is orphaned
	if err := c.Reload(sites("")); err != nil {
		t.Fatal(err)
	}
	// the reload replaced the admin server: a connection to the old one
	// gets no answer, a new one does
	var src map[string]any
	testkit.Eventually(t, 30*time.Second, "the admin API after the reload", func() bool {
		resp, err := testkit.NewConnectionClient.Get(c.AdminURL("/webhook_idempotency/docs_inbox"))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return err == nil && resp.StatusCode == http.StatusOK && json.Unmarshal(b, &src) == nil
	})
	sc.check("source", "GET /docs_inbox after a reload", src)
	if d, _ := src["destinations"].([]any); len(d) != 2 || d[1].(map[string]any)["orphaned"] != true {
		t.Errorf("after a reload without the route: %v, want its destination orphaned", src["destinations"])
	}

	// every documented field this setup can produce was seen
	cannot := map[string][]string{
		"source": {"unavailable"}, // a store that does not answer
		"key":    {"lease_left_ms", "corrupt"},
		"event":  {"body_omitted", "body_size", "body_redacted"},
		// a dead letter's body is redacted by the archive's code
		// (internal/archive, internal/inbox's tests)
		"dead letter": {"body_redacted", "body_omitted"},
		// a list that failed to load (e2e/edge, internal/edge/list_test.go)
		"allow list": {"last_error"},
	}
	for shape, doc := range sc.shapes {
		for field := range doc {
			if !sc.seen[shape][field] && !slices.Contains(cannot[shape], field) {
				t.Errorf("docs/admin.md documents %q in the %s shape, but no answer had it", field, shape)
			}
		}
	}
}
