package webhookidempotency

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bwmarrin/discordgo"
	"github.com/slack-go/slack/slackevents"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/results"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
	"github.com/webhookguard/caddy-webhook-idempotency/store"
)

// signedRequest is a POST of body to target, signed as the case of scheme
// signs with secret.
func signedRequest(t *testing.T, scheme, secret, target string, body []byte) *http.Request {
	t.Helper()
	for _, c := range sigtest.Cases() {
		if c.Label() == scheme {
			c.Body = string(body)
			if target != "" {
				c.Target = target
			}
			return c.Delivery(t, secret, time.Now()).Req
		}
	}
	t.Fatalf("no case %s", scheme)
	return nil
}

// wantHandshake checks an answered handshake: status, content type and
// body, result `handshake`, the next handler not called, and the key the
// delivery would have had still absent from the store.
func wantHandshake(t *testing.T, h *Handler, got served, calls *atomic.Int64, body []byte, status int, contentType, want string) {
	t.Helper()
	if got.err != nil || got.w.Code != status || got.w.Header().Get("Content-Type") != contentType || got.w.Body.String() != want {
		t.Fatalf("answer: %v %d %q %q, want %d %q %q", got.err, got.w.Code, got.w.Header().Get("Content-Type"), got.w.Body.String(), status, contentType, want)
	}
	if got.result != results.Handshake || got.key != "" {
		t.Fatalf("result %q key %q, want handshake and no key", got.result, got.key)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("next handler called %d times", n)
	}
	sum := sha256.Sum256(body)
	res, err := h.store.backend.Claim(context.Background(), h.keyPrefix+hashKey(&sum), "probe", time.Second)
	if err != nil || res.State != store.StateClaimed {
		t.Fatalf("the store holds the handshake's key: %v %v", res.State, err)
	}
	if err := h.store.backend.Release(context.Background(), h.keyPrefix+hashKey(&sum), "probe"); err != nil {
		t.Fatal(err)
	}
}

func TestHandshakeMetaSubscription(t *testing.T) {
	t.Setenv("WEBHOOK_TEST_VERIFY_TOKEN", "meta token/+&=")
	h := newTestHandler(t, &Handler{
		Provider:    "whatsapp",
		Verify:      &providers.VerifyConfig{Secrets: []string{"app-secret"}},
		VerifyToken: "{env.WEBHOOK_TEST_VERIFY_TOKEN}",
	})
	subscribe := func(token string) *http.Request {
		q := url.Values{"hub.mode": {"subscribe"}, "hub.verify_token": {token}, "hub.challenge": {"1158201444"}}
		return httptest.NewRequest(http.MethodGet, "/whatsapp?"+q.Encode(), nil)
	}
	var calls atomic.Int64
	got := serveReq(h, subscribe("meta token/+&="), countingNext(&calls))
	wantHandshake(t, h, got, &calls, nil, http.StatusOK, "text/plain", "1158201444")

	for _, token := range []string{"meta token", "", "META TOKEN/+&="} {
		got = serveReq(h, subscribe(token), countingNext(&calls))
		if got.w.Code != http.StatusForbidden || got.w.Body.String() != `{"error":"invalid verify token"}` || got.result != results.InvalidSignature {
			t.Fatalf("token %q: %d %s %q", token, got.w.Code, got.w.Body, got.result)
		}
	}
	// another GET is passed on, untouched
	got = serveReq(h, httptest.NewRequest(http.MethodGet, "/whatsapp?hub.mode=unsubscribe", nil), countingNext(&calls))
	if got.result != results.Skipped || calls.Load() != 1 {
		t.Fatalf("other GET: %q, %d calls", got.result, calls.Load())
	}
	// a POST is a delivery, whatever its query: it must be signed
	got = serveReq(h, httptest.NewRequest(http.MethodPost, "/whatsapp?hub.mode=subscribe&hub.verify_token=x", strings.NewReader("{}")), countingNext(&calls))
	if got.w.Code != http.StatusUnauthorized {
		t.Fatalf("unsigned POST: %d", got.w.Code)
	}

	// with GET among the methods the check is still answered, unsigned
	withGet := newTestHandler(t, &Handler{
		Source:      "whatsapp-get",
		Provider:    "whatsapp",
		Methods:     []string{"GET", "POST"},
		Verify:      &providers.VerifyConfig{Secrets: []string{"app-secret"}},
		VerifyToken: "t",
	})
	calls.Store(0)
	wantHandshake(t, withGet, serveReq(withGet, subscribe("t"), countingNext(&calls)), &calls, nil, http.StatusOK, "text/plain", "1158201444")

	// without a verify_token, or with handshake off, it is passed on
	for _, cfg := range []*Handler{
		{Source: "wa-no-token", Provider: "whatsapp", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}},
		{Source: "wa-off", Provider: "whatsapp", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, Handshake: "off"},
	} {
		hh := newTestHandler(t, cfg)
		calls.Store(0)
		got = serveReq(hh, subscribe("t"), countingNext(&calls))
		if got.result != results.Skipped || calls.Load() != 1 {
			t.Fatalf("%s: %q, %d calls", cfg.Source, got.result, calls.Load())
		}
	}
}

func TestHandshakeSlackURLVerification(t *testing.T) {
	const secret = "8f742231b10e8888abcd99yyyzzz85a5"
	h := newTestHandler(t, &Handler{Provider: "slack", Verify: &providers.VerifyConfig{Secrets: []string{secret}}})
	// a challenge that needs escaping in JSON
	event := slackevents.EventsAPIURLVerificationEvent{Token: "Jhj5dZrVaK7ZwHHjRyZWjbDl", Challenge: `3eZbrw1aB"m2rZ<\u2028>é`, Type: slackevents.URLVerification}
	body, _ := json.Marshal(event)
	// slack-go reads it as a url_verification
	if parsed, err := slackevents.ParseEvent(body, slackevents.OptionNoVerifyToken()); err != nil || parsed.Type != slackevents.URLVerification {
		t.Fatalf("slack-go: %v %v", parsed.Type, err)
	}
	var calls atomic.Int64
	got := serveReq(h, signedRequest(t, "slack", secret, "/slack", body), countingNext(&calls))
	want, _ := json.Marshal(map[string]string{"challenge": event.Challenge})
	wantHandshake(t, h, got, &calls, body, http.StatusOK, "application/json", string(want))
	var answer slackevents.ChallengeResponse
	if err := json.Unmarshal(got.w.Body.Bytes(), &answer); err != nil || answer.Challenge != event.Challenge {
		t.Fatalf("slack-go's ChallengeResponse: %+v %v", answer, err)
	}

	// unsigned or forged: 401 like any delivery
	forged := signedRequest(t, "slack", "wrong", "/slack", body)
	if got := serveReq(h, forged, countingNext(&calls)); got.w.Code != http.StatusUnauthorized || calls.Load() != 0 {
		t.Fatalf("forged: %d, %d calls", got.w.Code, calls.Load())
	}
	// an event is a delivery
	ev := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","text":"url_verification"}}`)
	if got := serveReq(h, signedRequest(t, "slack", secret, "/slack", ev), countingNext(&calls)); got.result != results.New || calls.Load() != 1 {
		t.Fatalf("event: %q, %d calls", got.result, calls.Load())
	}

	// handshake off, or verify off: passed on like a delivery
	for _, cfg := range []*Handler{
		{Source: "slack-off", Provider: "slack", Verify: &providers.VerifyConfig{Secrets: []string{secret}}, Handshake: "off"},
		{Source: "slack-unverified", Provider: "slack", Verify: &providers.VerifyConfig{Scheme: "off"}},
	} {
		hh := newTestHandler(t, cfg)
		calls.Store(0)
		if got := serveReq(hh, signedRequest(t, "slack", secret, "/slack", body), countingNext(&calls)); got.result != results.New || calls.Load() != 1 {
			t.Fatalf("%s: %q, %d calls", cfg.Source, got.result, calls.Load())
		}
	}
}

func TestHandshakeZoomURLValidation(t *testing.T) {
	// the first secret is the current secret token
	h := newTestHandler(t, &Handler{Provider: "zoom", Verify: &providers.VerifyConfig{Secrets: []string{"zoom-new", "zoom-old"}}})
	body := []byte(`{"payload":{"plainToken":"qgg8vlvZRS6UYooatFL8Aw"},"event_ts":1654503849680,"event":"endpoint.url_validation"}`)
	mac := hmac.New(sha256.New, []byte("zoom-new"))
	mac.Write([]byte("qgg8vlvZRS6UYooatFL8Aw"))
	want := `{"plainToken":"qgg8vlvZRS6UYooatFL8Aw","encryptedToken":"` + hex.EncodeToString(mac.Sum(nil)) + `"}`
	var calls atomic.Int64
	for _, secret := range []string{"zoom-new", "zoom-old"} {
		got := serveReq(h, signedRequest(t, "zoom", secret, "/zoom", body), countingNext(&calls))
		wantHandshake(t, h, got, &calls, body, http.StatusOK, "application/json", want)
	}
	if got := serveReq(h, signedRequest(t, "zoom", "forged", "/zoom", body), countingNext(&calls)); got.w.Code != http.StatusUnauthorized {
		t.Fatalf("forged: %d", got.w.Code)
	}
}

func TestHandshakeDiscordPing(t *testing.T) {
	pub := hex.EncodeToString(sigtest.Ed25519Public("discord-app-1"))
	h := newTestHandler(t, &Handler{Provider: "discord", Verify: &providers.VerifyConfig{PublicKeys: []string{pub}}})
	ping := []byte(`{"application_id":"1093","id":"1106","token":"aW50","type":1,"user":{"id":"53908","username":"mason"},"version":1}`)
	var calls atomic.Int64
	got := serveReq(h, signedRequest(t, "discord", "discord-app-1", "/discord", ping), countingNext(&calls))
	wantHandshake(t, h, got, &calls, ping, http.StatusOK, "application/json", `{"type":1}`)
	var pong discordgo.InteractionResponse
	if err := json.Unmarshal(got.w.Body.Bytes(), &pong); err != nil || pong.Type != discordgo.InteractionResponsePong {
		t.Fatalf("discordgo reads %+v, %v", pong, err)
	}
	// Discord checks that an endpoint refuses a bad signature
	if got := serveReq(h, signedRequest(t, "discord", "discord-wrong", "/discord", ping), countingNext(&calls)); got.w.Code != http.StatusUnauthorized {
		t.Fatalf("bad signature: %d", got.w.Code)
	}
	// a command is a delivery
	cmd := []byte(`{"id":"1107","type":2,"data":{"name":"ping"}}`)
	if got := serveReq(h, signedRequest(t, "discord", "discord-app-1", "/discord", cmd), countingNext(&calls)); got.result != results.New || got.key != "1107" || calls.Load() != 1 {
		t.Fatalf("command: %q key %q, %d calls", got.result, got.key, calls.Load())
	}
}

// Discord's interactions and webhook events share a signature: each body
// of discord-interactions 4.4.0's vectors (internal/sigtest/testdata) is
// answered as that library's middleware for its API answered it, or
// passed on to the application when the middleware passed it on.
func TestHandshakeDiscordTellsItsTwoAPIsApart(t *testing.T) {
	vecs := sigtest.LoadDiscord(t)
	h := newTestHandler(t, &Handler{Source: "discord-two-apis", Provider: "discord", Verify: &providers.VerifyConfig{PublicKeys: []string{vecs.PublicKey}}})
	for _, vec := range vecs.Vectors {
		t.Run(vec.Name, func(t *testing.T) {
			var calls atomic.Int64
			body := []byte(vec.Body)
			got := serveReq(h, signedRequest(t, "discord", "discord-app-1", "/discord", body), countingNext(&calls))
			if vec.SDK.PassedOn {
				if got.result != results.New || calls.Load() != 1 {
					t.Fatalf("%s: result %q, %d calls; discord-interactions passes it on", vec.API, got.result, calls.Load())
				}
				return
			}
			wantHandshake(t, h, got, &calls, body, vec.SDK.Status, vec.SDK.ContentType, vec.SDK.Body)
			if vec.SDK.Status == http.StatusNoContent && got.w.Header().Get("Content-Length") != "" {
				t.Fatalf("a 204 with Content-Length %q", got.w.Header().Get("Content-Length"))
			}
		})
	}
	// a webhook event is never a PING, whatever else it carries, and an
	// interaction (it has a token) never has type 0
	for _, body := range []string{
		`{"version":1,"application_id":"1","type":1,"event":{"type":"APPLICATION_DEAUTHORIZED","timestamp":"2024-10-18T14:42:53.064834","data":{"user":{"id":"5"}}}}`,
		`{"type":0,"token":"aW50"}`,
	} {
		var calls atomic.Int64
		if got := serveReq(h, signedRequest(t, "discord", "discord-app-1", "/discord", []byte(body)), countingNext(&calls)); got.result != results.New || calls.Load() != 1 {
			t.Fatalf("%s: result %q, %d calls, want passed on", body, got.result, calls.Load())
		}
	}
	// a bare `{"type":1}`, with neither a token nor an event, is the
	// interactions PING (discord-interactions answers it so)
	var calls atomic.Int64
	bare := []byte(`{"type":1}`)
	got := serveReq(h, signedRequest(t, "discord", "discord-app-1", "/discord", bare), countingNext(&calls))
	wantHandshake(t, h, got, &calls, bare, http.StatusOK, "application/json", `{"type":1}`)
}

// A Discord webhook event carries no id: its key is its body (json:id
// finds nothing), so Discord's retry of the same event, signed anew, is a
// duplicate, and another event is not.
func TestHandshakeDiscordWebhookEventKey(t *testing.T) {
	vecs := sigtest.LoadDiscord(t)
	h := newTestHandler(t, &Handler{Source: "discord-event-keys", Provider: "discord", Verify: &providers.VerifyConfig{PublicKeys: []string{vecs.PublicKey}}})
	var calls atomic.Int64
	keys := map[string]bool{}
	for _, vec := range vecs.Vectors {
		if vec.API != "webhook events" || !vec.SDK.PassedOn {
			continue
		}
		body := []byte(vec.Body)
		first := serveReq(h, signedRequest(t, "discord", "discord-app-1", "/discord", body), countingNext(&calls))
		sum := sha256.Sum256(body)
		if first.result != results.New || first.key != hashKey(&sum) {
			t.Fatalf("%s: result %q key %q, want new under the body's key", vec.Name, first.result, first.key)
		}
		keys[first.key] = true
		// Discord retries an event it got no 204 for (its "Webhook
		// Events", responding to events), signing each attempt anew
		retry := signedRequest(t, "discord", "discord-app-1", "/discord", body)
		if got := serveReq(h, retry, countingNext(&calls)); got.result != results.Replayed {
			t.Fatalf("%s: retry %q, want replayed", vec.Name, got.result)
		}
	}
	if len(keys) != 2 || calls.Load() != 2 {
		t.Fatalf("%d keys, %d calls: want each of the two events once", len(keys), calls.Load())
	}
}

func TestHandshakeTwitchCallbackVerification(t *testing.T) {
	const secret = "twitch-secret-0001"
	h := newTestHandler(t, &Handler{Provider: "twitch", Verify: &providers.VerifyConfig{Secrets: []string{secret}}})
	body := []byte(`{"challenge":"pogchamp-kappa-360noscope-vohiyo","subscription":{"id":"f1c2a387","status":"webhook_callback_verification_pending","type":"channel.follow","version":"2"}}`)
	r := signedRequest(t, "twitch", secret, "/twitch", body)
	r.Header.Set("Twitch-Eventsub-Message-Type", "webhook_callback_verification")
	var calls atomic.Int64
	got := serveReq(h, r, countingNext(&calls))
	wantHandshake(t, h, got, &calls, body, http.StatusOK, "text/plain", "pogchamp-kappa-360noscope-vohiyo")
	if n, _ := strconv.Atoi(got.w.Header().Get("Content-Length")); n != len("pogchamp-kappa-360noscope-vohiyo") {
		t.Fatalf("Content-Length %q", got.w.Header().Get("Content-Length"))
	}
	// a notification with a challenge field is still a delivery
	r = signedRequest(t, "twitch", secret, "/twitch", body)
	if got := serveReq(h, r, countingNext(&calls)); got.result != results.New || calls.Load() != 1 {
		t.Fatalf("notification: %q, %d calls", got.result, calls.Load())
	}
}

func TestHandshakeConfigErrors(t *testing.T) {
	for _, c := range []struct {
		h    Handler
		want string
	}{
		{Handler{Provider: "slack", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, VerifyToken: "t"}, "verify_token is the token of Meta's subscription check"},
		{Handler{Provider: "stripe", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, Handshake: "on"}, "the stripe preset has no handshake to answer (" + strings.Join(providers.HandshakeProviders(), ", ") + " have one)"},
		{Handler{Provider: "slack", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, Handshake: "yes"}, "invalid handshake 'yes': want on or off"},
		{Handler{Provider: "whatsapp", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, VerifyToken: "t", Handshake: "off"}, "verify_token is unused with 'handshake off'"},
		{Handler{Source: "no-preset", Handshake: "on"}, "handshake and verify_token need a preset with a handshake (" + strings.Join(providers.HandshakeProviders(), ", ") + ")"},
		{Handler{Source: "no-preset", VerifyToken: "t"}, "handshake and verify_token need a preset with a handshake"},
		{Handler{Provider: "whatsapp", Verify: &providers.VerifyConfig{Secrets: []string{"s"}}, VerifyToken: "{env.WEBHOOK_TEST_UNSET_TOKEN}"}, "resolving verify_token: evaluated placeholder {env.WEBHOOK_TEST_UNSET_TOKEN} is empty"},
	} {
		ctx, cancel := testkit.NewContext(t)
		h := c.h
		err := h.Provision(ctx)
		_ = h.Cleanup()
		cancel()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c.h, err, c.want)
		}
	}
}
