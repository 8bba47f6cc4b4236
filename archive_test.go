package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/archive"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/event"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// These tests run a real Caddy in front of a real upstream, with the archive
// on a real Redis or on the memory store: the archive as the handler
// builds it from its configuration and feeds it on the request path. The
// archive's own workings (backends, ring, trimming) are tested in
// internal/archive.

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

// The secrets of TestArchiveRedis: none may be stored anywhere in Redis.
const (
	archiveCard      = "4242424242424242"
	archiveBearer    = "bearer-token-do-not-store"
	archiveCardHdr   = "card-in-a-header-do-not-store"
	archiveNestedPAN = "5555444433331111"
)

// TestArchiveRedis: every verified delivery with a key is archived (new,
// replayed, a released 5xx), nothing else (forged, too large, skipped);
// each event carries what the archive documents; redacted values and
// credential headers are stored nowhere in Redis; the metrics count the
// appends.
func TestArchiveRedis(t *testing.T) {
	const source = "arch_redis"
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.Contains(r.URL.Path, "fail") {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", archiveSite(port, source, "redis redis://"+srv.Addr()+" {\n\t\t\ttimeout 2s\n\t\t}",
		"1h {\n\t\t\tredact header:X-Card json:card.number json:wallet.#.pan\n\t\t}", up.Addr()))
	before := archiveMetrics(t, c)
	url := testkit.SiteURL(port)

	body1 := `{"id":"evt_1","card":{"number":"` + archiveCard + `","brand":"visa"},"wallet":[{"pan":"` + archiveNestedPAN + `"}]}`
	resp, b := signedPost(t, url+"/hook?x=1", body1, "Authorization", "Bearer "+archiveBearer, "X-Card", archiveCardHdr, "X-Other", "kept")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("new: %s %s", resp.Status, b)
	}
	resp, b = signedPost(t, url+"/hook?x=1", body1)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(record.ReplayedHeader) != "true" {
		t.Fatalf("replay: %s %v %s", resp.Status, resp.Header, b)
	}
	// not archived: forged, too large, skipped
	if resp, _ := testkit.Post(t, url+"/hook", []byte(`{"id":"evt_forged"}`), "X-Sig", "00"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %s", resp.Status)
	}
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 4096) + `"}`
	if resp, _ := signedPost(t, url+"/hook", big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("too large: %s", resp.Status)
	}
	if resp, _ := testkit.Do(t, http.MethodGet, url+"/hook", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("skipped: %s", resp.Status)
	}
	// a 502 releases the key: archived with its status
	if resp, _ := signedPost(t, url+"/fail", `{"id":"evt_fail"}`); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("fail: %s", resp.Status)
	}

	rc := srv.Client(t)
	stream := "{idem:" + source + "}:archive"
	var msgs []redis.XMessage
	testkit.Eventually(t, 10*time.Second, "three archived events", func() bool {
		msgs = rc.XRange(t.Context(), stream, "-", "+").Val()
		return len(msgs) >= 3
	})
	time.Sleep(100 * time.Millisecond) // nothing more arrives
	if msgs = rc.XRange(t.Context(), stream, "-", "+").Val(); len(msgs) != 3 {
		t.Fatalf("archive holds %d events, want 3: %v", len(msgs), msgs)
	}
	// bodies are kept apart, in a stream of their own under the events' ids
	bodies := map[string]string{}
	for _, m := range rc.XRange(t.Context(), stream+":body", "-", "+").Val() {
		bodies[m.ID] = archiveField(m.Values["b"])
	}
	byResult := map[string]map[string]any{}
	for _, m := range msgs {
		if _, ok := m.Values["body"]; ok {
			t.Errorf("event %s holds its body among its fields", m.ID)
		}
		if body, ok := bodies[m.ID]; ok {
			m.Values["body"] = body
		}
		byResult[archiveField(m.Values["result"])+"/"+archiveField(m.Values["key"])] = m.Values
	}
	if len(bodies) != 2 {
		t.Errorf("%d bodies stored, want 2 (a replay's is not): %v", len(bodies), bodies)
	}
	sum := sha256.Sum256([]byte(body1))
	first := byResult["new/evt_1"]
	replay := byResult["replayed/evt_1"]
	failed := byResult["new/evt_fail"]
	if first == nil || replay == nil || failed == nil {
		t.Fatalf("events: %v", byResult)
	}
	for name, want := range map[string]string{
		"source": source, "status": "200", "method": "POST", "uri": "/hook?x=1",
		"proto": "http", "remote": "127.0.0.1", "body_sha256": hex.EncodeToString(sum[:]), "redacted": "body",
	} {
		if got := archiveField(first[name]); got != want {
			t.Errorf("new event %s = %q, want %q", name, got, want)
		}
	}
	wantBody := `{"id":"evt_1","card":{"number":"[redacted]","brand":"visa"},"wallet":[{"pan":"[redacted]"}]}`
	if got := archiveField(first["body"]); got != wantBody {
		t.Errorf("new event body\n got %s\nwant %s", got, wantBody)
	}
	testkit.MustContain(t, archiveField(first["headers"]), "Authorization: [redacted]\r\n", "X-Card: [redacted]\r\n", "X-Other: kept\r\n", "Content-Type: application/json\r\n")
	received := event.UnixMilli(archiveField(first["received"]))
	if time.Since(received) > time.Minute || time.Since(received) < 0 {
		t.Errorf("received %s", received)
	}
	if us := archiveField(first["duration_us"]); us == "" || us == "0" {
		t.Errorf("duration_us %q", us)
	}
	if _, ok := replay["body"]; ok {
		t.Errorf("a replay's body is stored: %v", replay)
	}
	if archiveField(replay["body_sha256"]) != hex.EncodeToString(sum[:]) || archiveField(replay["status"]) != "200" {
		t.Errorf("replay event: %v", replay)
	}
	if archiveField(failed["status"]) != "502" || archiveField(failed["body"]) != `{"id":"evt_fail"}` {
		t.Errorf("failed event: %v", failed)
	}

	// nothing redacted is stored anywhere
	assertRedisHoldsNone(t, rc, archiveCard, archiveBearer, archiveCardHdr, archiveNestedPAN)

	after := archiveMetrics(t, c)
	for name, want := range map[string]float64{
		"caddy_webhook_idempotency_archive_events_total":  3,
		"caddy_webhook_idempotency_archive_errors_total":  0,
		"caddy_webhook_idempotency_archive_dropped_total": 0,
	} {
		b, _ := before.value(name, "source", source)
		a, ok := after.value(name, "source", source)
		if !ok || a-b != want {
			t.Errorf("%s went from %v to %v (present %v), want +%v", name, b, a, ok, want)
		}
	}
}

// assertRedisHoldsNone fails if any key or value in Redis contains one of
// the secrets.
func assertRedisHoldsNone(t *testing.T, rc *redis.Client, secrets ...string) {
	t.Helper()
	ctx := t.Context()
	var all strings.Builder
	iter := rc.Scan(ctx, 0, "*", 1000).Iterator()
	n := 0
	for iter.Next(ctx) {
		key := iter.Val()
		n++
		all.WriteString(key + "\n")
		switch rc.Type(ctx, key).Val() {
		case "string":
			all.WriteString(rc.Get(ctx, key).Val())
		case "stream":
			for _, m := range rc.XRange(ctx, key, "-", "+").Val() {
				for k, v := range m.Values {
					all.WriteString(k + "=" + archiveField(v) + "\n")
				}
			}
		case "zset":
			all.WriteString(strings.Join(rc.ZRange(ctx, key, 0, -1).Val(), "\n"))
		default:
			t.Fatalf("unexpected key type of %s", key)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("Redis holds no key at all")
	}
	for _, s := range secrets {
		if strings.Contains(all.String(), s) {
			t.Fatalf("Redis holds the redacted value %q", s)
		}
	}
}

// archiveOf returns the archive of the running handler of source.
func archiveOf(t *testing.T, source string) *archive.Archive {
	t.Helper()
	app, err := caddy.ActiveContext().App("webhook_idempotency")
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range app.(*App).handlers {
		if h.Source == source && h.archive != nil {
			return h.archive
		}
	}
	t.Fatalf("no running handler with an archive for %q", source)
	return nil
}

// archiveFindAll returns every archived event of a, newest first, as a
// list shows them (without headers and body).
func archiveFindAll(t *testing.T, a *archive.Archive) []archive.Event {
	t.Helper()
	evs, _, err := a.Find(context.Background(), archive.Query{Count: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// TestArchiveStoreDownNeverFailsTheAnswer: with Redis down, a delivery
// that fails open is answered by the upstream as ever; its event cannot be
// appended, which is counted, and nothing else happens.
func TestArchiveStoreDownNeverFailsTheAnswer(t *testing.T) {
	const source = "arch_down"
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		store redis redis://%s {
			timeout 200ms
		}
		archive
	}
	reverse_proxy %s
}`, port, source, srv.Addr(), up.Addr()))
	before := archiveMetrics(t, c)
	srv.Kill()
	for i := range 3 {
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/hook", []byte("down"), "Idempotency-Key", fmt.Sprint("down-", i))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"call"`) {
			t.Fatalf("delivery %d with Redis down: %s %s", i, resp.Status, b)
		}
	}
	if n := up.Calls.Load(); n != 3 {
		t.Fatalf("upstream called %d times, want 3", n)
	}
	const errorsName = "caddy_webhook_idempotency_archive_errors_total"
	b, _ := before.value(errorsName, "source", source)
	testkit.Eventually(t, 10*time.Second, "the failed appends to be counted", func() bool {
		a, _ := archiveMetrics(t, c).value(errorsName, "source", source)
		return a-b == 3
	})
	// counters live as long as the process: count from before
	const requestsName = "caddy_webhook_idempotency_requests_total"
	was, _ := before.value(requestsName, "source", source, "result", results.Bypassed)
	if v, _ := archiveMetrics(t, c).value(requestsName, "source", source, "result", results.Bypassed); v-was != 3 {
		t.Fatalf("bypassed %v more, want 3", v-was)
	}
}

// archiveField is a stream field's value as a string.
func archiveField(v any) string {
	s, _ := v.(string)
	return s
}

// archiveScrape is one read of Caddy's metrics: each series, written as
// its name and its labels sorted, and its value.
type archiveScrape map[string]float64

// archiveMetrics reads Caddy's metrics from the admin endpoint.
func archiveMetrics(t *testing.T, c *testkit.Caddy) archiveScrape {
	t.Helper()
	resp, body := testkit.Do(t, http.MethodGet, c.AdminURL("/metrics"), nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics endpoint: %s: %s", resp.Status, body)
	}
	s := archiveScrape{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			t.Fatalf("metrics line without a value: %q", line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		name, labels, _ := strings.Cut(line[:i], "{")
		var pairs []string
		for labels = strings.TrimSuffix(labels, "}"); labels != ""; {
			k, rest, _ := strings.Cut(labels, "=")
			val, err := strconv.QuotedPrefix(rest)
			if err != nil {
				t.Fatalf("metrics line %q: %v", line, err)
			}
			pairs = append(pairs, k+"="+val)
			labels = strings.TrimPrefix(rest[len(val):], ",")
		}
		s[archiveSeries(name, pairs)] = v
	}
	return s
}

// value returns the value of the series name with labels given as name,
// value pairs (all of them), and whether it is present.
func (s archiveScrape) value(name string, labels ...string) (float64, bool) {
	var pairs []string
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, labels[i]+"="+strconv.Quote(labels[i+1]))
	}
	v, ok := s[archiveSeries(name, pairs)]
	return v, ok
}

func archiveSeries(name string, pairs []string) string {
	slices.Sort(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}
