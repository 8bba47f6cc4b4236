package providers_test

import (
	"encoding/json"
	"net/http"
	"os"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// octokitRepeated are the GitHub webhook payloads that
// @octokit/webhooks-examples 7.6.1 (api.github.com/index.json) holds twice,
// byte for byte: org_block, membership, organization, sponsorship and
// github_app_authorization carry no id or time of the event, so blocking a
// user, unblocking and blocking again sends the same bytes under another
// X-GitHub-Delivery. testdata/ has each as JSON.stringify wrote it.
type octokitRepeated struct {
	Source   string `json:"source"`
	Payloads []struct {
		Event string `json:"event"`
		Body  string `json:"body"`
	} `json:"payloads"`
}

// Two GitHub deliveries with byte-identical bodies and different
// X-GitHub-Delivery ids are two events: with the github preset's defaults
// (replay_guard flag) both reach the application, the second with
// Webhook-Replay-Suspected naming the first delivery, counted in
// caddy_webhook_idempotency_replays_suspected_total; a retry under either
// id is still answered from the store.
func TestGitHubIdenticalBodiesAreTwoEvents(t *testing.T) {
	data, err := os.ReadFile("testdata/octokit-webhooks-examples-7.6.1-repeated.json")
	if err != nil {
		t.Fatal(err)
	}
	var corpus octokitRepeated
	if err := json.Unmarshal(data, &corpus); err != nil {
		t.Fatal(err)
	}
	if len(corpus.Payloads) != 5 {
		t.Fatalf("%d repeated payloads, want the five of the corpus", len(corpus.Payloads))
	}
	const secret = "octokit-examples-secret"
	up := testkit.NewUpstream(t, nil)
	c, base := proxy(t, "webhook_idempotency github secret "+secret, up)
	hook := base + "/github"
	for i, p := range corpus.Payloads {
		body := []byte(p.Body)
		first, second := p.Event+"-delivery-1", p.Event+"-delivery-2"
		resp, got := signed(t, hook, "github", secret, body, "X-GitHub-Event", p.Event, "X-GitHub-Delivery", first)
		testkit.WantNew(t, resp, got, http.StatusOK)
		resp, got = signed(t, hook, "github", secret, body, "X-GitHub-Event", p.Event, "X-GitHub-Delivery", second)
		testkit.WantNew(t, resp, got, http.StatusOK)
		reqs := up.Requests()
		if len(reqs) != 2*(i+1) {
			t.Fatalf("%s: the application got %d deliveries, want %d", p.Event, len(reqs), 2*(i+1))
		}
		for j, want := range []struct{ id, suspected string }{{first, ""}, {second, first}} {
			r := reqs[2*i+j]
			if r.Header.Get("X-GitHub-Delivery") != want.id || string(r.Body) != p.Body {
				t.Fatalf("%s: delivery %d is %q, want %s", p.Event, j+1, r.Header.Get("X-GitHub-Delivery"), want.id)
			}
			if got := r.Header.Get("Webhook-Replay-Suspected"); got != want.suspected {
				t.Fatalf("%s, %s: Webhook-Replay-Suspected %q, want %q", p.Event, want.id, got, want.suspected)
			}
		}
		// GitHub's redelivery keeps the delivery's id
		for _, id := range []string{first, second} {
			resp, got = signed(t, hook, "github", secret, body, "X-GitHub-Event", p.Event, "X-GitHub-Delivery", id)
			if resp.Header.Get(testkit.ReplayedHeader) != "true" {
				t.Fatalf("%s: redelivery of %s: %d %s, want a replay", p.Event, id, resp.StatusCode, got)
			}
		}
	}
	up.WantCalls(t, 10)
	wantMetric(t, c, 5, "caddy_webhook_idempotency_replays_suspected_total", "source", "github")
	wantMetric(t, c, 10, "caddy_webhook_idempotency_requests_total", "source", "github", "result", "new")
}
