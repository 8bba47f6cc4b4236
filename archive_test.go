//go:build porting

package webhookidempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
)

// These tests run a real Caddy in front of a real upstream, with the archive
// on a real Redis or on the memory store.

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
	return post(t, url, []byte(body), append([]string{"X-Sig", sigtest.HMACHex(archiveSecret, body), "Content-Type", "application/json"}, header...)...)
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
	srv := startRedis(t)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if strings.Contains(r.URL.Path, "fail") {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := freePort(t)
	c := startCaddy(t, "", archiveSite(port, source, "redis redis://"+srv.addr()+" {\n\t\t\ttimeout 2s\n\t\t}",
		"1h {\n\t\t\tredact header:X-Card json:card.number json:wallet.#.pan\n\t\t}", up.addr()))
	before := c.scrapeMetrics(t)
	url := siteURL(port)

	body1 := `{"id":"evt_1","card":{"number":"` + archiveCard + `","brand":"visa"},"wallet":[{"pan":"` + archiveNestedPAN + `"}]}`
	resp, b := signedPost(t, url+"/hook?x=1", body1, "Authorization", "Bearer "+archiveBearer, "X-Card", archiveCardHdr, "X-Other", "kept")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("new: %s %s", resp.Status, b)
	}
	resp, b = signedPost(t, url+"/hook?x=1", body1)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(replayedHeader) != "true" {
		t.Fatalf("replay: %s %v %s", resp.Status, resp.Header, b)
	}
	// not archived: forged, too large, skipped
	if resp, _ := post(t, url+"/hook", []byte(`{"id":"evt_forged"}`), "X-Sig", "00"); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("forged: %s", resp.Status)
	}
	big := `{"id":"evt_big","pad":"` + strings.Repeat("x", 4096) + `"}`
	if resp, _ := signedPost(t, url+"/hook", big); resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("too large: %s", resp.Status)
	}
	if resp, _ := do(t, http.MethodGet, url+"/hook", nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("skipped: %s", resp.Status)
	}
	// a 502 releases the key: archived with its status
	if resp, _ := signedPost(t, url+"/fail", `{"id":"evt_fail"}`); resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("fail: %s", resp.Status)
	}

	rc := srv.client(t)
	stream := "{idem:" + source + "}:archive"
	var msgs []redis.XMessage
	adminWait(t, 10*time.Second, "three archived events", func() bool {
		msgs = rc.XRange(t.Context(), stream, "-", "+").Val()
		return len(msgs) >= 3
	})
	time.Sleep(100 * time.Millisecond) // nothing more arrives
	if msgs = rc.XRange(t.Context(), stream, "-", "+").Val(); len(msgs) != 3 {
		t.Fatalf("archive holds %d events, want 3: %v", len(msgs), msgs)
	}
	byResult := map[string]map[string]any{}
	for _, m := range msgs {
		byResult[str(m.Values["result"])+"/"+str(m.Values["key"])] = m.Values
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
		if got := str(first[name]); got != want {
			t.Errorf("new event %s = %q, want %q", name, got, want)
		}
	}
	wantBody := `{"id":"evt_1","card":{"number":"[redacted]","brand":"visa"},"wallet":[{"pan":"[redacted]"}]}`
	if got := str(first["body"]); got != wantBody {
		t.Errorf("new event body\n got %s\nwant %s", got, wantBody)
	}
	mustContain(t, str(first["headers"]), "Authorization: [redacted]\r\n", "X-Card: [redacted]\r\n", "X-Other: kept\r\n", "Content-Type: application/json\r\n")
	received := unixMilli(str(first["received"]))
	if time.Since(received) > time.Minute || time.Since(received) < 0 {
		t.Errorf("received %s", received)
	}
	if us := str(first["duration_us"]); us == "" || us == "0" {
		t.Errorf("duration_us %q", us)
	}
	if _, ok := replay["body"]; ok {
		t.Errorf("a replay's body is stored: %v", replay)
	}
	if str(replay["body_sha256"]) != hex.EncodeToString(sum[:]) || str(replay["status"]) != "200" {
		t.Errorf("replay event: %v", replay)
	}
	if str(failed["status"]) != "502" || str(failed["body"]) != `{"id":"evt_fail"}` {
		t.Errorf("failed event: %v", failed)
	}

	// nothing redacted is stored anywhere
	assertRedisHoldsNone(t, rc, archiveCard, archiveBearer, archiveCardHdr, archiveNestedPAN)

	after := c.scrapeMetrics(t)
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
					all.WriteString(k + "=" + str(v) + "\n")
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
func archiveOf(t *testing.T, source string) *archive {
	t.Helper()
	hs := sourceHandlers(source)
	if len(hs) == 0 || hs[0].archive == nil {
		t.Fatalf("no running handler with an archive for %q", source)
	}
	return hs[0].archive
}

// findAll returns every archived event of a, newest first.
func findAll(t *testing.T, a *archive) []archivedEvent {
	t.Helper()
	evs, _, err := a.find(context.Background(), archiveQuery{count: maxArchiveCount}, archiveScanMax)
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
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	c := startCaddy(t, "", fmt.Sprintf(`http://127.0.0.1:%d {
	webhook_idempotency {
		source %s
		store redis redis://%s {
			timeout 200ms
		}
		archive
	}
	reverse_proxy %s
}`, port, source, srv.addr(), up.addr()))
	before := c.scrapeMetrics(t)
	srv.kill()
	for i := range 3 {
		resp, b := post(t, siteURL(port)+"/hook", []byte("down"), "Idempotency-Key", fmt.Sprint("down-", i))
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), `"call"`) {
			t.Fatalf("delivery %d with Redis down: %s %s", i, resp.Status, b)
		}
	}
	if n := up.calls.Load(); n != 3 {
		t.Fatalf("upstream called %d times, want 3", n)
	}
	const errorsName = "caddy_webhook_idempotency_archive_errors_total"
	b, _ := before.value(errorsName, "source", source)
	adminWait(t, 10*time.Second, "the failed appends to be counted", func() bool {
		a, _ := c.scrapeMetrics(t).value(errorsName, "source", source)
		return a-b == 3
	})
	if v, _ := c.scrapeMetrics(t).value("caddy_webhook_idempotency_requests_total", "source", source, "result", resultBypassed); v != 3 {
		t.Fatalf("bypassed %v, want 3", v)
	}
}
