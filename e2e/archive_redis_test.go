package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// What the archive holds in Redis, read with a Redis client: which
// deliveries are archived, each event's fields, the bodies kept apart, and
// no redacted value anywhere in Redis.

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
	before := c.Metrics(t)
	url := testkit.SiteURL(port)

	body1 := `{"id":"evt_1","card":{"number":"` + archiveCard + `","brand":"visa"},"wallet":[{"pan":"` + archiveNestedPAN + `"}]}`
	resp, b := signedPost(t, url+"/hook?x=1", body1, "Authorization", "Bearer "+archiveBearer, "X-Card", archiveCardHdr, "X-Other", "kept")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("new: %s %s", resp.Status, b)
	}
	resp, b = signedPost(t, url+"/hook?x=1", body1)
	if resp.StatusCode != http.StatusOK || resp.Header.Get(testkit.ReplayedHeader) != "true" {
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
	// no more than three: this sleep waits for an event that must not
	// come (a forged, too large or skipped request archived late)
	time.Sleep(100 * time.Millisecond)
	if msgs = rc.XRange(t.Context(), stream, "-", "+").Val(); len(msgs) != 3 {
		t.Fatalf("archive holds %d events, want 3: %v", len(msgs), msgs)
	}
	// bodies are kept apart, in a stream of their own under the events' ids
	bodies := map[string]string{}
	for _, m := range rc.XRange(t.Context(), stream+":body", "-", "+").Val() {
		bodies[m.ID] = testkit.FieldString(m.Values["b"])
	}
	byResult := map[string]map[string]any{}
	for _, m := range msgs {
		if _, ok := m.Values["body"]; ok {
			t.Errorf("event %s holds its body among its fields", m.ID)
		}
		if body, ok := bodies[m.ID]; ok {
			m.Values["body"] = body
		}
		byResult[testkit.FieldString(m.Values["result"])+"/"+testkit.FieldString(m.Values["key"])] = m.Values
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
		if got := testkit.FieldString(first[name]); got != want {
			t.Errorf("new event %s = %q, want %q", name, got, want)
		}
	}
	wantBody := `{"id":"evt_1","card":{"number":"[redacted]","brand":"visa"},"wallet":[{"pan":"[redacted]"}]}`
	if got := testkit.FieldString(first["body"]); got != wantBody {
		t.Errorf("new event body\n got %s\nwant %s", got, wantBody)
	}
	testkit.MustContain(t, testkit.FieldString(first["headers"]), "Authorization: [redacted]\r\n", "X-Card: [redacted]\r\n", "X-Other: kept\r\n", "Content-Type: application/json\r\n")
	ms, err := strconv.ParseInt(testkit.FieldString(first["received"]), 10, 64) // unix milliseconds (docs/archive.md)
	if err != nil {
		t.Fatalf("received %q: %v", first["received"], err)
	}
	received := time.UnixMilli(ms)
	if time.Since(received) > time.Minute || time.Since(received) < 0 {
		t.Errorf("received %s", received)
	}
	if us := testkit.FieldString(first["duration_us"]); us == "" || us == "0" {
		t.Errorf("duration_us %q", us)
	}
	if _, ok := replay["body"]; ok {
		t.Errorf("a replay's body is stored: %v", replay)
	}
	if testkit.FieldString(replay["body_sha256"]) != hex.EncodeToString(sum[:]) || testkit.FieldString(replay["status"]) != "200" {
		t.Errorf("replay event: %v", replay)
	}
	if testkit.FieldString(failed["status"]) != "502" || testkit.FieldString(failed["body"]) != `{"id":"evt_fail"}` {
		t.Errorf("failed event: %v", failed)
	}

	// nothing redacted is stored anywhere
	assertRedisHoldsNone(t, rc, archiveCard, archiveBearer, archiveCardHdr, archiveNestedPAN)

	after := c.Metrics(t)
	for name, want := range map[string]float64{
		"caddy_webhook_idempotency_archive_events_total":  3,
		"caddy_webhook_idempotency_archive_errors_total":  0,
		"caddy_webhook_idempotency_archive_dropped_total": 0,
	} {
		b, _ := before.Value(name, "source", source)
		a, ok := after.Value(name, "source", source)
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
					all.WriteString(k + "=" + testkit.FieldString(v) + "\n")
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
