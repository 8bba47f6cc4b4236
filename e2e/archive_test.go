package e2e

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The archive as an operator reads it through the admin API, on every
// store: what a list, one event and an export read and hold, and which
// events they show.

// archivedEvent is an event as the admin API shows it.
type archivedEvent struct {
	ID           string              `json:"id"`
	Key          string              `json:"key"`
	Result       string              `json:"result"`
	Status       int                 `json:"status"`
	BodySHA256   string              `json:"body_sha256"`
	BodyStored   bool                `json:"body_stored"`
	BodySize     *int                `json:"body_size"`
	BodyRedacted bool                `json:"body_redacted"`
	BodyOmitted  string              `json:"body_omitted"`
	URI          string              `json:"uri"`
	Headers      map[string][]string `json:"headers"`
	Body         *string             `json:"body"`
}

type archivedList struct {
	Events []archivedEvent `json:"events"`
	Cursor string          `json:"cursor"`
}

// archiveSecret is the HMAC secret of archiveSite's route.
const archiveSecret = "archive-hmac-secret"

// archiveSite is a site whose handler verifies an HMAC of the body in
// X-Sig, keys on json:id, and archives with the given archive block.
func archiveSite(port int, source, store, archiveBlock, upstream string) string {
	return fmt.Sprintf(`
http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		verify hmac {
			header X-Sig
			secret %s
		}
		key json:id
		max_body 2KB
		store %s
		archive %s
	}
	reverse_proxy %s
}`, port, source, archiveSecret, store, archiveBlock, upstream)
}

// signedPost sends a delivery signed for archiveSite.
func signedPost(t *testing.T, url string, body string, header ...string) (*http.Response, []byte) {
	t.Helper()
	return testkit.Post(t, url, []byte(body), append([]string{"X-Sig", sigtest.HMACHex(archiveSecret, body), "Content-Type", "application/json"}, header...)...)
}

// archiveStores are the stores an archive runs on, as a route's `store`
// line.
func archiveStores(t *testing.T) map[string]string {
	srv := testkit.StartRedis(t)
	return map[string]string{
		"memory": "memory",
		"file":   "file " + filepath.Join(t.TempDir(), "store.db"),
		// a Redis call's bound is generous: these tests are about what is
		// archived, and a loaded machine takes more than the default
		// 500ms to append a body of megabytes
		"redis": "redis redis://" + srv.Addr() + " {\n\t\t\ttimeout 10s\n\t\t}",
	}
}

// allocated returns what the process allocated while fn ran (Caddy runs
// in this process).
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// liveHeap returns the bytes of the heap still in use, after a collection.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// A list reads no body, and an export holds one body at a time: with 20
// events of 3 MB, listing one event allocates next to nothing (before, a
// list read every body of its page, and on Redis past the store's
// timeout), one event comes whole, and an export streams every event
// whole while the process holds far less than the archive.
func TestArchiveLargeBodiesAreReadOnlyWhenShown(t *testing.T) {
	const n, size = 20, 3_000_000
	pad := bytes.Repeat([]byte("x"), size-40)
	body := func(i int) []byte { return fmt.Appendf(nil, `{"n":%d,"pad":"%s"}`, i, pad) }
	for name, store := range archiveStores(t) {
		t.Run(name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			source := "large_" + name
			c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		max_body 6MB
		store %s
		archive
	}
	reverse_proxy %s
}`, port, source, store, up.Addr()))
			url := testkit.SiteURL(port) + "/hook"
			sums, sizes := map[string]string{}, map[string]int{}
			for i := range n {
				key := fmt.Sprintf("big_%d", i)
				b := body(i)
				sum := sha256.Sum256(b)
				sums[key], sizes[key] = hex.EncodeToString(sum[:]), len(b)
				resp, rb := testkit.Post(t, url, b, "Idempotency-Key", key, "Content-Type", "application/json")
				testkit.WantNew(t, resp, rb, http.StatusOK)
			}
			events := "/webhook_idempotency/" + source + "/events"
			// the archive appends 60 MB in the background: on a loaded
			// machine under the race detector that takes minutes
			testkit.Eventually(t, 5*time.Minute, "every event archived", func() bool {
				var l archivedList
				c.AdminJSON(t, http.MethodGet, events+"?count=100", &l)
				return len(l.Events) == n
			})

			var one archivedList
			if a := allocated(func() { c.AdminJSON(t, http.MethodGet, events+"?count=1", &one) }); a > 16<<20 {
				t.Errorf("listing one event allocated %d MB", a>>20)
			}
			var all archivedList
			if a := allocated(func() { c.AdminJSON(t, http.MethodGet, events, &all) }); a > 16<<20 {
				t.Errorf("listing %d events allocated %d MB", n, a>>20)
			}
			if len(one.Events) != 1 || one.Events[0].Key != "big_19" || len(all.Events) != n {
				t.Fatalf("lists: %d events (first %+v), %d events", len(one.Events), one.Events, len(all.Events))
			}
			for _, ev := range all.Events {
				if ev.Body != nil || !ev.BodyStored || ev.BodySize == nil || *ev.BodySize != sizes[ev.Key] {
					t.Fatalf("listed event %s: stored %v, size %v, body shown %v", ev.ID, ev.BodyStored, ev.BodySize, ev.Body != nil)
				}
			}

			var whole archivedEvent
			c.AdminJSON(t, http.MethodGet, events+"/"+all.Events[7].ID, &whole)
			if whole.Body == nil || whole.Key != all.Events[7].Key || sha(*whole.Body) != sums[whole.Key] {
				t.Fatalf("one event whole: key %s, body present %v", whole.Key, whole.Body != nil)
			}

			// the export: read one line, then see what the process holds
			// while the export waits for the reader
			base := liveHeap()
			// 60 MB read under the race detector: no 20 s bound on the whole
			exportClient := &http.Client{Timeout: 10 * time.Minute}
			resp, err := exportClient.Get(c.AdminURL(events + "/export"))
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/x-ndjson" {
				b, _ := io.ReadAll(resp.Body)
				t.Fatalf("export: %s %s", resp.Status, b)
			}
			r := bufio.NewReaderSize(resp.Body, 64<<10)
			first, err := r.ReadBytes('\n')
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond) // the export fills what the connection holds
			held := int64(liveHeap()) - int64(base)
			t.Logf("%s: the export holds %d MB beyond the process's heap before it", name, held>>20)
			if held > 48<<20 {
				t.Errorf("while the reader waits, the export holds %d MB for an archive of %d MB", held>>20, n*size>>20)
			}
			lines := append([][]byte{first}, readLines(t, r)...)
			if len(lines) != n {
				t.Fatalf("export: %d lines, want %d", len(lines), n)
			}
			for _, line := range lines {
				var ev archivedEvent
				if err := json.Unmarshal(line, &ev); err != nil {
					t.Fatalf("export line: %v", err)
				}
				if ev.Body == nil || sha(*ev.Body) != sums[ev.Key] || ev.BodySHA256 != sums[ev.Key] {
					t.Fatalf("exported %s: body present %v, sha %s", ev.Key, ev.Body != nil, ev.BodySHA256)
				}
			}
		})
	}
}

// readLines reads lines (NDJSON) until the end of r.
func readLines(t *testing.T, r *bufio.Reader) [][]byte {
	t.Helper()
	var lines [][]byte
	for {
		line, err := r.ReadBytes('\n')
		if len(line) > 0 {
			lines = append(lines, line)
		}
		if err == io.EOF {
			return lines
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// Retention holds for reads: an event older than retention is neither
// listed, fetched, exported nor counted, on every store, although no
// append has trimmed it (the source is idle).
func TestArchiveRetentionHoldsForReads(t *testing.T) {
	// seconds of slack on each side: the recent event is appended while
	// the old one is still within retention, and read while it is
	const retention = 10 * time.Second
	for name, store := range archiveStores(t) {
		t.Run(name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			source := "retention_" + name
			c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		store %s
		archive %s
	}
	reverse_proxy %s
}`, port, source, store, retention, up.Addr()))
			url := testkit.SiteURL(port) + "/hook"
			events := "/webhook_idempotency/" + source + "/events"
			post := func(key string) archivedEvent {
				resp, rb := testkit.Post(t, url, []byte(`{"k":"`+key+`"}`), "Idempotency-Key", key)
				testkit.WantNew(t, resp, rb, http.StatusOK)
				var l archivedList
				c.AdminJSON(t, http.MethodGet, events+"?key="+key, &l)
				if len(l.Events) != 1 {
					t.Fatalf("%s archived %d times", key, len(l.Events))
				}
				return l.Events[0]
			}
			oldSent := time.Now()
			old := post("old")
			oldDone := time.Now()
			// an append after the old event's retention could trim it: the
			// recent one comes before, with 3 s to spare
			time.Sleep(time.Until(oldDone.Add(retention - 3*time.Second)))
			post("recent")
			if late := time.Since(oldSent); late >= retention {
				t.Fatalf("the recent event was appended %v after the old one, past its retention", late)
			}
			// old is past retention, recent is not (for 6 s more), and
			// nothing is appended
			time.Sleep(time.Until(oldDone.Add(retention + 500*time.Millisecond)))

			var l archivedList
			c.AdminJSON(t, http.MethodGet, events, &l)
			if len(l.Events) != 1 || l.Events[0].Key != "recent" {
				t.Fatalf("listed past retention: %+v", l.Events)
			}
			if resp, b := testkit.Do(t, http.MethodGet, c.AdminURL(events+"/"+old.ID), nil); resp.StatusCode != http.StatusNotFound {
				t.Fatalf("an event past retention fetched: %s %s", resp.Status, b)
			}
			resp, b := testkit.Do(t, http.MethodGet, c.AdminURL(events+"/export"), nil)
			if resp.StatusCode != http.StatusOK || strings.Count(string(b), "\n") != 1 || strings.Contains(string(b), `"key":"old"`) {
				t.Fatalf("export: %s %s", resp.Status, b)
			}
			var st struct {
				Archive struct {
					Events *int64 `json:"events"`
				} `json:"archive"`
			}
			c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/"+source, &st)
			if st.Archive.Events == nil || *st.Archive.Events != 1 {
				t.Fatalf("archive size %v, want 1", st.Archive.Events)
			}
		})
	}
}

// The credentials providers put in their bodies are archived redacted by
// the presets, with the headers and query parameters named like a
// credential: Stripe's client_secret, Slack's verification token,
// Evolution API's instance apikey, a Discord interaction's token, Zoom's
// download_token (docs/providers.md: Credentials in bodies).
func TestArchivePresetsRedactCredentialsInBodies(t *testing.T) {
	const headerSecret, querySecret = "hdr-secret-do-not-store", "query-secret-do-not-store"
	cases := map[string]*sigtest.Case{}
	for _, c := range sigtest.Cases() {
		switch {
		case c.Scheme == "evolution" && c.Header == "apikey", c.Scheme == "stripe", c.Scheme == "slack", c.Scheme == "discord", c.Scheme == "zoom":
			cases[c.Scheme] = &c
		}
	}
	deliveries := []struct {
		preset, verify, body, secret string
	}{
		{"stripe", "secret %s", `{"id":"evt_cs","object":"event","type":"payment_intent.succeeded","data":{"object":{"id":"pi_1","object":"payment_intent","client_secret":"pi_1_secret_stripe-client-secret"}}}`, "pi_1_secret_stripe-client-secret"},
		{"slack", "secret %s", `{"token":"slack-verification-token","team_id":"T1","api_app_id":"A1","event":{"type":"app_mention"},"type":"event_callback","event_id":"Ev0CS","event_time":1}`, "slack-verification-token"},
		{"evolution", "verify evolution {\n\t\t\theader apikey\n\t\t\tsecret %s\n\t\t}", `{"event":"messages.upsert","instance":"main","data":{"key":{"id":"3EB0"}},"destination":"https://app.example/hook","date_time":"2026-01-02T03:04:05.000Z","sender":"5511999999999@s.whatsapp.net","server_url":"https://evo.example","apikey":"evolution-instance-apikey"}`, "evolution-instance-apikey"},
		{"discord", "public_key %s", `{"type":2,"id":"1077353146577514497","application_id":"11","token":"discord-interaction-token","data":{"name":"ping"}}`, "discord-interaction-token"},
		{"zoom", "secret %s", `{"event":"recording.completed","event_ts":1626230691572,"payload":{"account_id":"AAAA","object":{"id":"1234567890"}},"download_token":"zoom-download-token"}`, "zoom-download-token"},
	}
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	var routes strings.Builder
	for _, d := range deliveries {
		c := cases[d.preset]
		if c == nil {
			t.Fatalf("no sigtest case for %s", d.preset)
		}
		key := c.Secrets[0]
		if c.Public != nil {
			key = c.Public(key)
		}
		fmt.Fprintf(&routes, `
	handle /%[1]s {
		webhook_idempotency %[1]s {
			%[2]s
			store memory
			archive
		}
		reverse_proxy %[3]s
	}`, d.preset, fmt.Sprintf(d.verify, key), up.Addr())
	}
	c := testkit.StartCaddy(t, "", fmt.Sprintf(":%d {%s\n}", port, routes.String()))
	for _, d := range deliveries {
		sc := cases[d.preset]
		target := "/" + d.preset + "?auth_key=" + querySecret
		dl := sigtest.NewDelivery(target, []byte(d.body), time.Now())
		sc.Sign(t, sc.Secrets[0], dl)
		req, err := http.NewRequest(http.MethodPost, testkit.SiteURL(port)+target, bytes.NewReader(dl.Body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = dl.Req.Header.Clone()
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Auth-Key", headerSecret)
		resp, err := testkit.Client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %s %s", d.preset, resp.Status, b)
		}

		_, export := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/"+d.preset+"/events/export"), nil)
		var ev archivedEvent
		if err := json.Unmarshal(export, &ev); err != nil {
			t.Fatalf("%s export: %v: %s", d.preset, err, export)
		}
		for _, s := range []string{d.secret, headerSecret, querySecret} {
			if strings.Contains(string(export), s) {
				t.Errorf("%s: the archive holds %q: %s", d.preset, s, export)
			}
		}
		if ev.Body == nil || !strings.Contains(*ev.Body, `"[redacted]"`) || !ev.BodyRedacted ||
			ev.Headers["X-Auth-Key"][0] != "[redacted]" || !strings.Contains(ev.URI, "auth_key=[redacted]") {
			t.Errorf("%s: event %+v", d.preset, ev)
		}
	}
}

// A route that redacts JSON values keeps no body it cannot read strictly:
// a byte order mark, trailing data, NaN or a comment used to keep the body
// whole, card number included (an application's lenient parser reads it);
// now the event says why it has no body. A strict body is still kept,
// redacted.
func TestArchiveLenientJSONKeepsNoBody(t *testing.T) {
	const secret, card = "lenient-hmac-secret", "4111111111111111"
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source lenient
		verify hmac {
			header X-Sig
			secret %s
		}
		store memory
		archive {
			redact json:card.number
		}
	}
	reverse_proxy %s
}`, port, secret, up.Addr()))
	strict := `{"card":{"number":"` + card + `"}}`
	bodies := map[string]string{
		"strict":          strict,
		"byte order mark": "\ufeff" + strict,
		"trailing data":   strict + `{"card":{"number":"` + card + `"}}`,
		"NaN":             `{"amount":NaN,"card":{"number":"` + card + `"}}`,
		"comment":         `{/* note */"card":{"number":"` + card + `"}}`,
		"form":            `card[number]=` + card,
	}
	for name, body := range bodies {
		key := "k_" + strings.ReplaceAll(name, " ", "_")
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte(body), "X-Sig", sigtest.HMACHex(secret, body), "Idempotency-Key", key)
		testkit.WantNew(t, resp, b, http.StatusOK)
		var l archivedList
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/lenient/events?key="+key, &l)
		if len(l.Events) != 1 {
			t.Fatalf("%s: %d events", name, len(l.Events))
		}
		var ev archivedEvent
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/lenient/events/"+l.Events[0].ID, &ev)
		if name == "strict" {
			if ev.Body == nil || *ev.Body != `{"card":{"number":"[redacted]"}}` {
				t.Fatalf("strict: %+v", ev)
			}
			continue
		}
		if ev.Body != nil || ev.BodyStored || !strings.Contains(ev.BodyOmitted, "not strict JSON") {
			t.Errorf("%s: body kept %v (stored %v), omitted %q", name, ev.Body != nil, ev.BodyStored, ev.BodyOmitted)
		}
	}
	_, export := testkit.Do(t, http.MethodGet, c.AdminURL("/webhook_idempotency/lenient/events/export"), nil)
	if strings.Contains(string(export), card) || strings.Count(string(export), "\n") != len(bodies) {
		t.Fatalf("export: %s", export)
	}
}

// An export through the admin API gives every matching event, however
// many pages it spans (it stopped at 256 with a 200), on every store; one
// that cannot finish (the store lost mid-export) ends with an
// `{"error":…}` line (docs/archive.md).
func TestArchiveExportEveryEvent(t *testing.T) {
	const n = 300
	for name, store := range archiveStores(t) {
		t.Run(name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			source := "export_" + name
			c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source %s
		store %s
		archive
	}
	reverse_proxy %s
}`, port, source, store, up.Addr()))
			url := testkit.SiteURL(port) + "/hook"
			for i := range n {
				key := fmt.Sprint("e", i)
				resp, rb := testkit.Post(t, url, []byte(`{"k":"`+key+`"}`), "Idempotency-Key", key)
				testkit.WantNew(t, resp, rb, http.StatusOK)
			}
			events := "/webhook_idempotency/" + source + "/events"
			exported := func(query string) map[string]bool {
				resp, b := testkit.Do(t, http.MethodGet, c.AdminURL(events+"/export"+query), nil)
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("export: %s %s", resp.Status, b)
				}
				keys := map[string]bool{}
				for line := range bytes.Lines(b) {
					var ev archivedEvent
					if err := json.Unmarshal(line, &ev); err != nil || ev.Key == "" {
						t.Fatalf("export line %q: %v", line, err)
					}
					if keys[ev.Key] {
						t.Fatalf("%s exported twice", ev.Key)
					}
					keys[ev.Key] = true
				}
				return keys
			}
			if keys := exported(""); len(keys) != n {
				t.Fatalf("export: %d events of %d", len(keys), n)
			}
			if keys := exported("?result=new"); len(keys) != n {
				t.Fatalf("export of result=new: %d events of %d", len(keys), n)
			}
			if keys := exported("?count=257"); len(keys) != 257 {
				t.Fatalf("export of count=257: %d events", len(keys))
			}
		})
	}
}

// An export that loses its store midway ends with an `{"error":…}` line
// after the events it wrote, never with a silent end.
func TestArchiveExportCutShortSaysSo(t *testing.T) {
	const n, size = 40, 1 << 20
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency {
		source cut
		max_body 2MB
		store redis redis://%s
		archive
	}
	reverse_proxy %s
}`, port, srv.Addr(), up.Addr()))
	url := testkit.SiteURL(port) + "/hook"
	pad := strings.Repeat("x", size)
	for i := range n {
		key := fmt.Sprint("c", i)
		resp, rb := testkit.Post(t, url, []byte(`{"k":"`+key+`","pad":"`+pad+`"}`), "Idempotency-Key", key)
		testkit.WantNew(t, resp, rb, http.StatusOK)
	}
	events := "/webhook_idempotency/cut/events"
	resp, err := testkit.Client.Get(c.AdminURL(events + "/export"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("export: %s", resp.Status)
	}
	// the export waits for this reader after at most what the connection
	// holds (a few MB of 40): Redis goes away before it can finish
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	if _, err := r.ReadBytes('\n'); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	lines := readLines(t, r)
	if len(lines) == 0 || len(lines) >= n {
		t.Fatalf("export with Redis gone: %d more lines of %d", len(lines), n)
	}
	var last struct {
		Error string `json:"error"`
		Key   string `json:"key"`
	}
	if err := json.Unmarshal(lines[len(lines)-1], &last); err != nil || last.Error == "" || last.Key != "" {
		t.Fatalf("an export cut short ends with %.200q (%v), want an error line", lines[len(lines)-1], err)
	}
	t.Logf("%d events, then %s", len(lines), last.Error)
}

// TestArchiveMemoryAndReload: on the memory store the archive keeps its
// events across a reload that changes the handler, is bounded by
// max_events, and the search filters by key, result and status.
func TestArchiveMemoryAndReload(t *testing.T) {
	const source = "arch_memory"
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.Contains(r.URL.Path, "missing") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	port := testkit.FreePort(t)
	site := func(maxEvents int) string {
		return archiveSite(port, source, "memory", fmt.Sprintf("{\n\t\t\tmax_events %d\n\t\t\tredact json:secret\n\t\t}", maxEvents), up.Addr())
	}
	c := testkit.StartCaddy(t, "", site(5))
	url := testkit.SiteURL(port)
	events := "/webhook_idempotency/" + source + "/events"
	// list answers a search of the archive (docs/admin.md#archive-search)
	list := func(query string) []archivedEvent {
		t.Helper()
		var l archivedList
		c.AdminJSON(t, http.MethodGet, events+query, &l)
		return l.Events
	}
	for i := range 3 {
		body := fmt.Sprintf(`{"id":"m%d","secret":"s%d"}`, i, i)
		if resp, b := signedPost(t, url+"/hook", body); resp.StatusCode != http.StatusOK {
			t.Fatalf("new %d: %s %s", i, resp.Status, b)
		}
	}
	signedPost(t, url+"/hook", `{"id":"m0","secret":"s0"}`) // replayed
	signedPost(t, url+"/missing", `{"id":"m404"}`)          // a recorded 404
	evs := list("?count=1000")
	if len(evs) != 5 {
		t.Fatalf("%d events: %+v", len(evs), evs)
	}
	if evs[0].Key != "m404" || evs[0].Status != 404 || evs[1].Result != "replayed" || evs[4].Key != "m0" {
		t.Fatalf("events, newest first: %+v", evs)
	}
	var ev archivedEvent
	c.AdminJSON(t, http.MethodGet, events+"/"+evs[4].ID, &ev)
	if ev.Key != "m0" || ev.Body == nil || *ev.Body != `{"id":"m0","secret":"[redacted]"}` || !ev.BodyRedacted || ev.Headers["X-Sig"] == nil {
		t.Fatalf("event: %+v", ev)
	}

	// a reload with another bound keeps the events
	if err := c.Reload(site(6)); err != nil {
		t.Fatal(err)
	}
	resp, b := testkit.PostAfterReload(t, url+"/hook", []byte(`{"id":"m5"}`), "X-Sig", sigtest.HMACHex(archiveSecret, `{"id":"m5"}`))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("after reload: %s %s", resp.Status, b)
	}
	evs = list("?count=1000")
	if len(evs) != 6 || evs[0].Key != "m5" || evs[5].Key != "m0" {
		t.Fatalf("after reload: %+v", evs)
	}
	signedPost(t, url+"/hook", `{"id":"m6"}`)
	evs = list("?count=1000")
	if len(evs) != 6 || evs[0].Key != "m6" || evs[5].Key != "m1" {
		t.Fatalf("bounded at 6: %+v", evs)
	}

	// search
	for _, tc := range []struct {
		query, want string
	}{
		{"?key=m1&count=10", "m1"},
		{"?result=replayed&count=10", "m0"},
		{"?status=404&count=10", "m404"},
		{"?count=2", "m6 m5"},
	} {
		var keys []string
		for _, ev := range list(tc.query) {
			keys = append(keys, ev.Key)
		}
		if strings.Join(keys, " ") != tc.want {
			t.Errorf("%s: %v, want %s", tc.query, keys, tc.want)
		}
	}
}
