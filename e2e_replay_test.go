//go:build porting

package webhookidempotency

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
)

// A captured signed delivery re-sent with its unsigned id header changed
// must not be executed again within ttl (README: Guarantees): one signed
// GitHub delivery re-sent with X-GitHub-Delivery d1, d1, d2, none, d3 is
// executed once, and its key is still idem:github:<delivery id>.

const replaySecret = "replay-secret"

// resendSigned sends one signed github delivery under the delivery ids of
// the sequence ("" sends none) and returns the answers.
func resendSigned(t *testing.T, url string, body []byte, ids ...string) []*http.Response {
	t.Helper()
	sig := "sha256=" + sigtest.HMACHex(replaySecret, string(body))
	var out []*http.Response
	for _, id := range ids {
		header := []string{"X-Hub-Signature-256", sig, "X-GitHub-Event", "push"}
		if id != "" {
			header = append(header, "X-GitHub-Delivery", id)
		}
		resp, b := post(t, url, body, header...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery id %q: %d %s", id, resp.StatusCode, b)
		}
		out = append(out, resp)
	}
	return out
}

func githubSite(port int, up *upstream, extra string) string {
	return proxySite(port, fmt.Sprintf(`webhook_idempotency github {
		secret %s
		%s
	}`, replaySecret, extra), up)
}

// wantExecutedOnce checks that only the first of the answers reached the
// application and every other one is its replay.
func wantExecutedOnce(t *testing.T, up *upstream, answers []*http.Response, ids []string) {
	t.Helper()
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("one signed delivery re-sent under ids %q executed %d times, want 1", ids, n)
	}
	for i, resp := range answers[1:] {
		if resp.Header.Get(replayedHeader) != "true" {
			t.Fatalf("re-send %d (id %q) is not a replay", i+1, ids[i+1])
		}
	}
}

var replayIDs = []string{"d1", "d1", "d2", "", "d3"}

func TestE2EReplayUnderNewIDMemory(t *testing.T) {
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", githubSite(port, up, ""))
	answers := resendSigned(t, siteURL(port)+"/gh", []byte(`{"ref":"refs/heads/main","after":"c0ffee"}`), replayIDs...)
	wantExecutedOnce(t, up, answers, replayIDs)

	// another delivery with its own bytes is processed as ever
	answers = resendSigned(t, siteURL(port)+"/gh", []byte(`{"ref":"refs/heads/main","after":"beef"}`), "d4", "d4")
	if up.calls.Load() != 2 || answers[1].Header.Get(replayedHeader) != "true" {
		t.Fatalf("a new delivery: %d calls, second replayed %q", up.calls.Load(), answers[1].Header.Get(replayedHeader))
	}
}

func TestRedisReplayUnderNewID(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", githubSite(port, up, "store redis redis://"+srv.addr()))
	body := []byte(`{"ref":"refs/heads/main","after":"c0ffee"}`)
	answers := resendSigned(t, siteURL(port)+"/gh", body, replayIDs...)
	wantExecutedOnce(t, up, answers, replayIDs)

	// the delivery's key is still idem:github:<delivery id>, holding the
	// record; the body's key holds it too
	rc := srv.client(t)
	for _, key := range []string{"idem:github:d1", "idem:github:" + sha256Key(string(body))} {
		v, err := rc.Get(context.Background(), key).Bytes()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		if rec, err := decodeRecord(v); err != nil || rec.status != http.StatusOK {
			t.Fatalf("%s does not hold the 200 record: %v", key, err)
		}
	}
	for _, key := range []string{"idem:github:d2", "idem:github:d3"} {
		if n := rc.Exists(context.Background(), key).Val(); n != 0 {
			t.Fatalf("%s exists: a replay under a new id left a key", key)
		}
	}
}

func TestRedisClusterReplayUnderNewID(t *testing.T) {
	cluster := startRedisCluster(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", githubSite(port, up, cluster.storeBlock()))
	answers := resendSigned(t, siteURL(port)+"/gh", []byte(`{"ref":"refs/heads/main","after":"c1"}`), replayIDs...)
	wantExecutedOnce(t, up, answers, replayIDs)
}

// In inbox mode a replay under a new id is not accepted as a new event.
func TestRedisInboxReplayUnderNewID(t *testing.T) {
	srv := startRedis(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency github {
		secret %s
		store redis redis://%s
		inbox http://%s/app
	}
}`, port, replaySecret, srv.addr(), up.addr()))
	body := []byte(`{"ref":"refs/heads/main","after":"inbox"}`)
	sig := "sha256=" + sigtest.HMACHex(replaySecret, string(body))
	for i, id := range replayIDs {
		header := []string{"X-Hub-Signature-256", sig}
		if id != "" {
			header = append(header, "X-GitHub-Delivery", id)
		}
		resp, b := post(t, siteURL(port)+"/gh", body, header...)
		if resp.StatusCode != http.StatusAccepted || (i > 0) != (resp.Header.Get(replayedHeader) == "true") {
			t.Fatalf("delivery %d (id %q): %d %s, replayed %q", i, id, resp.StatusCode, b, resp.Header.Get(replayedHeader))
		}
	}
	// every accepted event is delivered once the stream has nothing
	// pending; a replay accepted under a new id would be a second delivery
	ib := inboxFor("github")
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, err := ib.counts(context.Background())
		if err == nil && c.Pending == 0 && c.Scheduled == 0 && up.calls.Load() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inbox not drained: %+v, %v", c, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := up.calls.Load(); n != 1 {
		t.Fatalf("application called %d times, want 1", n)
	}
}

// The guard follows its key: a delivery whose answer is not recorded (a
// 5xx) releases both, so the provider's retry is processed; one still in
// flight makes a replay under a new id wait (409) like a duplicate.
func TestE2EReplayGuardIsReleasedAndConflicts(t *testing.T) {
	g := newGate()
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if call == 2 {
			g.wait(r)
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := freePort(t)
	startCaddy(t, "", githubSite(port, up, ""))
	url := siteURL(port) + "/gh"
	body := []byte(`{"action":"opened","number":7}`)
	sig := "sha256=" + sigtest.HMACHex(replaySecret, string(body))

	resp, b := post(t, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g1")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("first attempt: %d %s", resp.StatusCode, b)
	}
	retry := sendAsync(http.MethodPost, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g1")
	waitCalls(t, up, 2)
	resp, b = post(t, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g2")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("replay under a new id while the retry is in flight: %d %s, want 409", resp.StatusCode, b)
	}
	g.open()
	if r := receive(t, retry); r.status != http.StatusOK || string(r.body) != `{"call":2}` {
		t.Fatalf("the retry: %d %s", r.status, r.body)
	}
	resp, b = post(t, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g2")
	wantReplay(t, resp, b, http.StatusOK, `{"call":2}`)
	wantCalls(t, up, 2)
}

// redisScriptCalls is the number of script calls (EVALSHA, EVAL) a Redis
// has run: the store's round trips (the commands a script runs are counted
// apart, under their own names).
func redisScriptCalls(t *testing.T, rc *redis.Client) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":calls=")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		calls, _, _ := strings.Cut(rest, ",")
		c, _ := strconv.ParseInt(calls, 10, 64)
		n += c
	}
	return n
}

// A guarded delivery costs Redis what one without a guard does: one
// command (one round trip) to claim, one to complete, one to replay.
func TestRedisGuardedDeliveryRoundTrips(t *testing.T) {
	srv := startRedis(t)
	rc := srv.client(t)
	up := newUpstream(t, nil)
	port := freePort(t)
	startCaddy(t, "", githubSite(port, up, "store redis redis://"+srv.addr()))
	url := siteURL(port) + "/gh"
	// Redis learns the scripts on first use (EVALSHA, then EVAL)
	resendSigned(t, url, []byte(`{"warm":"up"}`), "w1", "w1")

	before := redisScriptCalls(t, rc)
	resendSigned(t, url, []byte(`{"ref":"refs/heads/main","after":"round"}`), "r1")
	if n := redisScriptCalls(t, rc) - before; n != 2 {
		t.Fatalf("a new guarded delivery ran %d commands in Redis, want 2 (claim, complete)", n)
	}
	before = redisScriptCalls(t, rc)
	resendSigned(t, url, []byte(`{"ref":"refs/heads/main","after":"round"}`), "r2")
	if n := redisScriptCalls(t, rc) - before; n != 1 {
		t.Fatalf("a replay under a new id ran %d commands in Redis, want 1 (claim)", n)
	}
}

// A guarded delivery is archived like any other: the new delivery with the
// completion of its key and guard (on Redis Cluster, where the two are
// apart, the append rides with the key's call), its replays under a new id
// through the background queue.
func TestE2EArchiveGuardedDeliveriesMemory(t *testing.T) {
	testArchiveGuarded(t, "")
}

func TestRedisArchiveGuardedDeliveries(t *testing.T) {
	srv := startRedis(t)
	testArchiveGuarded(t, "store redis redis://"+srv.addr())
}

func TestRedisClusterArchiveGuardedDeliveries(t *testing.T) {
	cluster := startRedisCluster(t)
	testArchiveGuarded(t, cluster.storeBlock())
}

func testArchiveGuarded(t *testing.T, store string) {
	up := newUpstream(t, nil)
	port := freePort(t)
	c := startCaddy(t, "", githubSite(port, up, store+"\n\t\tarchive"))
	body := []byte(`{"ref":"refs/heads/main","after":"a4a4"}`)
	answers := resendSigned(t, siteURL(port)+"/gh", body, "d1", "d2")
	wantExecutedOnce(t, up, answers, []string{"d1", "d2"})
	type event struct{ Key, Result string }
	var got struct{ Events []event }
	adminWait(t, 10*time.Second, "two archived events", func() bool {
		adminJSON(t, c, http.MethodGet, "/webhook_idempotency/github/events", &got)
		return len(got.Events) >= 2
	})
	// newest first
	if want := []event{{"d2", resultReplayed}, {"d1", resultNew}}; len(got.Events) != 2 || got.Events[0] != want[0] || got.Events[1] != want[1] {
		t.Fatalf("archived %+v, want %+v", got.Events, want)
	}
	if v, _ := c.scrapeMetrics(t).value("caddy_webhook_idempotency_archive_errors_total", "source", "github"); v != 0 {
		t.Fatalf("%v archive appends failed", v)
	}
}
