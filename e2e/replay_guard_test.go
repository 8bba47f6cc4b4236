package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/record"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The replay guard (docs/caddyfile.md: Replays under a new
// id). With `replay_guard reject`, a captured signed delivery re-sent with
// its unsigned id header changed must not be executed again within ttl:
// one signed GitHub delivery re-sent with X-GitHub-Delivery d1, d1, d2,
// none, d3 is executed once, and its key is still idem:github:<delivery
// id>. With `flag`, the default, the re-sent delivery is processed and
// flagged to the application.

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
		resp, b := testkit.Post(t, url, body, header...)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("delivery id %q: %d %s", id, resp.StatusCode, b)
		}
		out = append(out, resp)
	}
	return out
}

// githubSite is a site on port with a github handler that rejects replays
// under a new id (`replay_guard reject`), with the lines extra in its
// block, in front of up.
func githubSite(port int, up *testkit.Upstream, extra string) string {
	return testkit.ProxySite(port, fmt.Sprintf(`webhook_idempotency github {
		secret %s
		replay_guard reject
		%s
	}`, replaySecret, extra), up)
}

// wantExecutedOnce checks that only the first of the answers reached the
// application and every other one is its replay.
func wantExecutedOnce(t *testing.T, up *testkit.Upstream, answers []*http.Response, ids []string) {
	t.Helper()
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("one signed delivery re-sent under ids %q executed %d times, want 1", ids, n)
	}
	for i, resp := range answers[1:] {
		if resp.Header.Get(testkit.ReplayedHeader) != "true" {
			t.Fatalf("re-send %d (id %q) is not a replay", i+1, ids[i+1])
		}
	}
}

var replayIDs = []string{"d1", "d1", "d2", "", "d3"}

func TestE2EReplayUnderNewID(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", githubSite(port, up, st.line))
			answers := resendSigned(t, testkit.SiteURL(port)+"/gh", []byte(`{"ref":"refs/heads/main","after":"c0ffee"}`), replayIDs...)
			wantExecutedOnce(t, up, answers, replayIDs)

			// another delivery with its own bytes is processed as ever
			answers = resendSigned(t, testkit.SiteURL(port)+"/gh", []byte(`{"ref":"refs/heads/main","after":"beef"}`), "d4", "d4")
			if up.Calls.Load() != 2 || answers[1].Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatalf("a new delivery: %d calls, second replayed %q", up.Calls.Load(), answers[1].Header.Get(testkit.ReplayedHeader))
			}
		})
	}
}

// With the default `replay_guard flag`, the same signed bytes under a new
// id are processed, and the application is told which key they came
// under first; a retry under the first id is a plain duplicate.
func TestE2EReplayUnderNewIDFlaggedByDefault(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) {
			up := testkit.NewUpstream(t, nil)
			port := testkit.FreePort(t)
			testkit.StartCaddy(t, "", testkit.ProxySite(port, fmt.Sprintf(`webhook_idempotency github {
		secret %s
		%s
	}`, replaySecret, st.line), up))
			answers := resendSigned(t, testkit.SiteURL(port)+"/gh", []byte(`{"action":"blocked","blocked_user":{"login":"octocat"}}`), "d1", "d1", "d2")
			for i, replayed := range []string{"", "true", ""} {
				if got := answers[i].Header.Get(testkit.ReplayedHeader); got != replayed {
					t.Fatalf("answer %d: %s %q, want %q", i, testkit.ReplayedHeader, got, replayed)
				}
			}
			reqs := up.Requests()
			if len(reqs) != 2 {
				t.Fatalf("the application got %d deliveries, want d1 and d2", len(reqs))
			}
			for i, want := range []string{"", "d1"} {
				if got := reqs[i].Header.Get("Webhook-Replay-Suspected"); got != want {
					t.Fatalf("delivery %d: Webhook-Replay-Suspected %q, want %q", i+1, got, want)
				}
			}
		})
	}
}

func TestRedisReplayUnderNewID(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", githubSite(port, up, "store redis redis://"+srv.Addr()))
	body := []byte(`{"ref":"refs/heads/main","after":"c0ffee"}`)
	answers := resendSigned(t, testkit.SiteURL(port)+"/gh", body, replayIDs...)
	wantExecutedOnce(t, up, answers, replayIDs)

	// the delivery's key is still idem:github:<delivery id>, holding the
	// record; the body's key holds it too
	rc := srv.Client(t)
	for _, key := range []string{"idem:github:d1", "idem:github:" + testkit.SHA256Key(string(body))} {
		v, err := rc.Get(context.Background(), key).Bytes()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		if rec, err := record.Decode(v); err != nil || rec.Status != http.StatusOK {
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
	cluster := testkit.StartCluster(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", githubSite(port, up, cluster.StoreBlock()))
	answers := resendSigned(t, testkit.SiteURL(port)+"/gh", []byte(`{"ref":"refs/heads/main","after":"c1"}`), replayIDs...)
	wantExecutedOnce(t, up, answers, replayIDs)
}

// In inbox mode a replay under a new id is not accepted as a new event.
func TestRedisInboxReplayUnderNewID(t *testing.T) {
	srv := testkit.StartRedis(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	webhook_idempotency github {
		secret %s
		replay_guard reject
		store redis redis://%s
		inbox http://%s/app
	}
}`, port, replaySecret, srv.Addr(), up.Addr()))
	body := []byte(`{"ref":"refs/heads/main","after":"inbox"}`)
	sig := "sha256=" + sigtest.HMACHex(replaySecret, string(body))
	for i, id := range replayIDs {
		header := []string{"X-Hub-Signature-256", sig}
		if id != "" {
			header = append(header, "X-GitHub-Delivery", id)
		}
		resp, b := testkit.Post(t, testkit.SiteURL(port)+"/gh", body, header...)
		if resp.StatusCode != http.StatusAccepted || (i > 0) != (resp.Header.Get(testkit.ReplayedHeader) == "true") {
			t.Fatalf("delivery %d (id %q): %d %s, replayed %q", i, id, resp.StatusCode, b, resp.Header.Get(testkit.ReplayedHeader))
		}
	}
	// every accepted event is delivered once the inbox has nothing
	// pending (the admin API's counts); a replay accepted under a new id
	// would be a second delivery
	testkit.WaitFor(t, 20*time.Second, "inbox drained", func() (bool, string) {
		var st struct {
			Inbox              bool
			Pending, Scheduled int64
		}
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/github", &st)
		return st.Inbox && st.Pending == 0 && st.Scheduled == 0 && up.Calls.Load() > 0,
			fmt.Sprintf("%+v, %d calls", st, up.Calls.Load())
	})
	if n := up.Calls.Load(); n != 1 {
		t.Fatalf("application called %d times, want 1", n)
	}
}

// The guard follows its key: a delivery whose answer is not recorded (a
// 5xx) releases both, so the provider's retry is processed; one still in
// flight makes a replay under a new id wait (409) like a duplicate.
func TestE2EReplayGuardIsReleasedAndConflicts(t *testing.T) {
	g := newGate()
	defer g.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		if call == 1 {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		if call == 2 {
			g.wait(r)
		}
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", githubSite(port, up, ""))
	url := testkit.SiteURL(port) + "/gh"
	body := []byte(`{"action":"opened","number":7}`)
	sig := "sha256=" + sigtest.HMACHex(replaySecret, string(body))

	resp, b := testkit.Post(t, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g1")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("first attempt: %d %s", resp.StatusCode, b)
	}
	retry := testkit.SendAsync(http.MethodPost, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g1")
	up.WaitCalls(t, 2, 10*time.Second)
	resp, b = testkit.Post(t, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g2")
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("replay under a new id while the retry is in flight: %d %s, want 409", resp.StatusCode, b)
	}
	g.open()
	if r := testkit.Receive(t, retry); r.Status != http.StatusOK || string(r.Body) != `{"call":2}` {
		t.Fatalf("the retry: %d %s", r.Status, r.Body)
	}
	resp, b = testkit.Post(t, url, body, "X-Hub-Signature-256", sig, "X-GitHub-Delivery", "g2")
	testkit.WantReplay(t, resp, b, http.StatusOK, `{"call":2}`)
	up.WantCalls(t, 2)
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
	srv := testkit.StartRedis(t)
	rc := srv.Client(t)
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", githubSite(port, up, "store redis redis://"+srv.Addr()))
	url := testkit.SiteURL(port) + "/gh"
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
func TestE2EArchiveGuardedDeliveries(t *testing.T) {
	for _, st := range stores {
		t.Run(st.name, func(t *testing.T) { testArchiveGuarded(t, st.line) })
	}
}

func TestRedisArchiveGuardedDeliveries(t *testing.T) {
	srv := testkit.StartRedis(t)
	testArchiveGuarded(t, "store redis redis://"+srv.Addr())
}

func TestRedisClusterArchiveGuardedDeliveries(t *testing.T) {
	cluster := testkit.StartCluster(t)
	testArchiveGuarded(t, cluster.StoreBlock())
}

func testArchiveGuarded(t *testing.T, store string) {
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	c := testkit.StartCaddy(t, "", githubSite(port, up, store+"\n\t\tarchive"))
	body := []byte(`{"ref":"refs/heads/main","after":"a4a4"}`)
	answers := resendSigned(t, testkit.SiteURL(port)+"/gh", body, "d1", "d2")
	wantExecutedOnce(t, up, answers, []string{"d1", "d2"})
	type event struct{ Key, Result string }
	var got struct{ Events []event }
	testkit.Eventually(t, 10*time.Second, "two archived events", func() bool {
		c.AdminJSON(t, http.MethodGet, "/webhook_idempotency/github/events", &got)
		return len(got.Events) >= 2
	})
	// newest first
	if want := []event{{"d2", "replayed"}, {"d1", "new"}}; len(got.Events) != 2 || got.Events[0] != want[0] || got.Events[1] != want[1] {
		t.Fatalf("archived %+v, want %+v", got.Events, want)
	}
	if v, _ := c.Metrics(t).Value("caddy_webhook_idempotency_archive_errors_total", "source", "github"); v != 0 {
		t.Fatalf("%v archive appends failed", v)
	}
}
