package e2e

import (
	"crypto/rsa"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// stoneDirective is a stone handler with its key set at jwksURL.
func stoneDirective(keyFile, jwksURL, extra string) string {
	return fmt.Sprintf(`webhook_idempotency stone {
		private_key {file.%s}
		jwks_url    %s
		%s
	}`, keyFile, jwksURL, extra)
}

func TestE2EStoneDecrypt(t *testing.T) {
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	up := testkit.NewUpstream(t, nil)
	port := testkit.FreePort(t)
	keyFile := sigtest.PartnerKeyFile(t)
	// the event id is outside the JWS: replays of a verified event under
	// another id are rejected (replay_guard reject)
	const extra = "decrypt\n\t\treplay_guard reject"
	c := testkit.StartCaddy(t, "", testkit.ProxySite(port, stoneDirective(keyFile, jwks.URL, extra), up))
	url := testkit.SiteURL(port) + "/stone"
	event := []byte(sigtest.StoneEvent)
	id := "930bbd6d-0c7a-4fe4-8b50-4b82a20cb847"

	// a forged delivery of the same event id is refused and claims nothing
	forged := sigtest.StoneDelivery(t, event, sigtest.RSAKey("stone-forger"), "stone-1", &partner.PublicKey)
	resp, body := testkit.Post(t, url, forged, "Content-Type", "application/json", "x-stone-webhook-event-id", id)
	wantRejected(t, resp, body, "invalid signature")
	resp, body = testkit.Post(t, url, event, "Content-Type", "application/json", "x-stone-webhook-event-id", id)
	wantRejected(t, resp, body, "missing signature")
	up.WantCalls(t, 0)

	resp, body = testkit.Post(t, url, sigtest.StoneDelivery(t, event, signer, "stone-1", &partner.PublicKey),
		"Content-Type", "text/plain", "x-stone-webhook-event-id", id)
	testkit.WantNew(t, resp, body, http.StatusOK)
	got := up.Requests()[0]
	if string(got.Body) != string(event) {
		t.Fatalf("upstream got %s, want the event", got.Body)
	}
	if got.ContentLength != int64(len(event)) || got.Header.Get("Content-Type") != "application/json" || len(got.TransferEncoding) != 0 {
		t.Fatalf("upstream got Content-Length %d (want %d), Content-Type %q, Transfer-Encoding %v",
			got.ContentLength, len(event), got.Header.Get("Content-Type"), got.TransferEncoding)
	}

	// Stone's retry: the envelope is encrypted anew, the event id is the same
	resp, body2 := testkit.Post(t, url, sigtest.StoneDelivery(t, event, signer, "stone-1", &partner.PublicKey), "x-stone-webhook-event-id", id)
	testkit.WantReplay(t, resp, body2, http.StatusOK, string(body))
	up.WantCalls(t, 1)
	// the event id header is outside the JWS: the same signed event under
	// another id is a replay too (the key's guard is the verified event's)
	resp, body2 = testkit.Post(t, url, sigtest.StoneDelivery(t, event, signer, "stone-1", &partner.PublicKey), "x-stone-webhook-event-id", "forged-id")
	testkit.WantReplay(t, resp, body2, http.StatusOK, string(body))
	up.WantCalls(t, 1)

	// an unchanged reload shares the key set: nothing is fetched
	before := jwks.Hits.Load()
	if err := c.Reload(testkit.ProxySite(port, stoneDirective(keyFile, jwks.URL, extra), up)); err != nil {
		t.Fatal(err)
	}
	another := []byte(strings.Replace(sigtest.StoneEvent, "54abd61c", "64abd61c", 1))
	resp, body = testkit.PostAfterReload(t, url, sigtest.StoneDelivery(t, another, signer, "stone-1", &partner.PublicKey), "x-stone-webhook-event-id", "another-event")
	testkit.WantNew(t, resp, body, http.StatusOK)
	if n := jwks.Hits.Load() - before; n != 0 {
		t.Fatalf("an unchanged reload fetched the key set %d times", n)
	}
}

func TestE2EStoneWithoutDecryptPassesTheEnvelope(t *testing.T) {
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := sigtest.NewJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, stoneDirective(sigtest.PartnerKeyFile(t), jwks.URL, ""), up) + "/stone"
	envelope := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey)
	// no event id header: the key is the hash of the verified event, so a
	// re-encrypted retry is still a duplicate
	resp, body := testkit.Post(t, url, envelope, "Content-Type", "application/json")
	testkit.WantNew(t, resp, body, http.StatusOK)
	if got := up.Requests()[0]; string(got.Body) != string(envelope) {
		t.Fatalf("upstream got %s, want the envelope as received", got.Body)
	}
	resp, body2 := testkit.Post(t, url, sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey), "Content-Type", "application/json")
	testkit.WantReplay(t, resp, body2, http.StatusOK, string(body))
}

// evolutionToken is a token as Evolution API makes it, signed here by
// golang-jwt's signer (Evolution signs with jsonwebtoken; the signature
// package replays its tokens).
func evolutionToken(t *testing.T, key string, iat time.Time) string {
	t.Helper()
	tok, err := gojwt.NewWithClaims(gojwt.SigningMethodHS256, gojwt.MapClaims{
		"iat": iat.Unix(), "exp": iat.Add(10 * time.Minute).Unix(), "app": "evolution", "action": "webhook",
	}).SignedString([]byte(key))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestE2EEvolutionJWT(t *testing.T) {
	t.Setenv("WEBHOOK_TEST_EVOLUTION_JWT_KEY", "evo-key")
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency evolution secret {env.WEBHOOK_TEST_EVOLUTION_JWT_KEY}", up) + "/evolution"
	body := []byte(`{"event":"messages.upsert","instance":"main","data":{"key":{"id":"3EB0C767D26A1D3A0B45"}},"date_time":"2026-01-01T00:00:00.000Z"}`)

	resp, rb := testkit.Post(t, url, body, "Authorization", "Bearer "+evolutionToken(t, "evo-key", time.Now().Add(-16*time.Minute)))
	wantRejected(t, resp, rb, "timestamp outside tolerance")
	resp, rb = testkit.Post(t, url, body, "Authorization", "Bearer "+evolutionToken(t, "another-key", time.Now()))
	wantRejected(t, resp, rb, "invalid signature")
	resp, rb = testkit.Post(t, url, body)
	wantRejected(t, resp, rb, "missing signature")
	up.WantCalls(t, 0)

	token := evolutionToken(t, "evo-key", time.Now())
	resp, rb = testkit.Post(t, url, body, "Authorization", "Bearer "+token)
	testkit.WantNew(t, resp, rb, http.StatusOK)
	// Evolution's retry carries the same token and body
	resp, rb2 := testkit.Post(t, url, body, "Authorization", "Bearer "+token)
	testkit.WantReplay(t, resp, rb2, http.StatusOK, string(rb))
	up.WantCalls(t, 1)
}

func TestE2EEvolutionHeaderToken(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	url := testkit.StartProxy(t, "webhook_idempotency evolution {\n\t\tverify evolution {\n\t\t\theader apikey\n\t\t\tsecret instance-token\n\t\t}\n\t}", up) + "/evolution"
	resp, rb := testkit.Post(t, url, []byte(`{"event":"connection.update"}`), "apikey", "wrong")
	wantRejected(t, resp, rb, "invalid signature")
	resp, rb = testkit.Post(t, url, []byte(`{"event":"connection.update"}`), "apikey", "instance-token")
	testkit.WantNew(t, resp, rb, http.StatusOK)
}

// Asaas counts a 409 as a failure, and 15 of them pause its queue: the
// preset waits for the first delivery and replays its answer.
func TestE2EAsaasWaitsForInFlight(t *testing.T) {
	g := newGate()
	defer g.open()
	up := testkit.NewUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		g.wait(r)
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	arrivals := testkit.NewProbe(t, "asaas")
	port := testkit.FreePort(t)
	testkit.StartCaddy(t, "", fmt.Sprintf(`:%d {
	route {
		e2e_probe asaas
		webhook_idempotency asaas secret asaas-token-123
		reverse_proxy %s
	}
}`, port, up.Addr()))
	url := testkit.SiteURL(port) + "/asaas"
	body := []byte(`{"id":"evt_05b708f961d739ea7eba7e4db318f621&368604920","event":"PAYMENT_RECEIVED"}`)

	resp, rb := testkit.Post(t, url, body, "asaas-access-token", "asaas-token-12")
	wantRejected(t, resp, rb, "invalid signature")

	first := testkit.SendAsync(http.MethodPost, url, body, "asaas-access-token", "asaas-token-123", "X-Probe", "first")
	up.WaitCalls(t, 1, 10*time.Second)
	dup := testkit.SendAsync(http.MethodPost, url, body, "asaas-access-token", "asaas-token-123", "X-Probe", "dup")
	testkit.Arrived(t, arrivals, "dup")
	// the duplicate is waiting, not answered 409 (which would come at once)
	select {
	case r := <-dup:
		t.Fatalf("the duplicate was answered while the first delivery was in flight: %d %s", r.Status, r.Body)
	case <-time.After(100 * time.Millisecond):
	}
	g.open()
	r1, r2 := testkit.Receive(t, first), testkit.Receive(t, dup)
	if r1.Status != http.StatusOK || r1.Header.Get(testkit.ReplayedHeader) != "" || string(r1.Body) != `{"call":1}` {
		t.Fatalf("first delivery: %d %v %s, want the processed 200", r1.Status, r1.Header, r1.Body)
	}
	if r2.Status != http.StatusOK || r2.Header.Get(testkit.ReplayedHeader) != "true" || string(r2.Body) != string(r1.Body) {
		t.Fatalf("duplicate: %d %v %s, want the replay of the first", r2.Status, r2.Header, r2.Body)
	}
	up.WantCalls(t, 1)
}

// Mercado Pago signs data.id as received: an order id with capital
// letters, through the preset, keyed on the notification id.
func TestE2EMercadoPagoCapitalDataID(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	base := testkit.StartProxy(t, "webhook_idempotency mercadopago secret mp-secret", up)
	body := []byte(`{"id":12345,"type":"order","action":"order.processed","data":{"id":"ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"}}`)
	ts := strconv.FormatInt(time.Now().Add(-2*time.Hour).Unix(), 10) // a retry keeps its first ts
	sign := func(reqID string) string {
		return "ts=" + ts + ",v1=" + sigtest.HMACHex("mp-secret", "id:ORD01JQ4S4KY8HWQ6NA5PXB65B3D3;request-id:"+reqID+";ts:"+ts+";")
	}
	url := base + "/mp?data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3&type=order"
	resp, rb := testkit.Post(t, url, body, "x-request-id", "req-1", "x-signature", sign("req-1"))
	testkit.WantNew(t, resp, rb, http.StatusOK)
	// the retry has a new x-request-id; the notification id is the key
	resp, rb2 := testkit.Post(t, url, body, "x-request-id", "req-2", "x-signature", sign("req-2"))
	testkit.WantReplay(t, resp, rb2, http.StatusOK, string(rb))
	resp, rb = testkit.Post(t, url, body, "x-request-id", "req-3", "x-signature", sign("req-2"))
	wantRejected(t, resp, rb, "invalid signature")
	up.WantCalls(t, 1)
}

// Shopify's event id is the same across the webhooks of one event; the
// webhook id differs per subscription.
func TestE2EShopifyEventID(t *testing.T) {
	up := testkit.NewUpstream(t, nil)
	base := testkit.StartProxy(t, "webhook_idempotency shopify secret shpss_test", up)
	body := []byte(`{"id":820982911946154508}`)
	sig := sigtest.HMACBase64("shpss_test", string(body))
	url := base + "/shopify"
	resp, rb := testkit.Post(t, url, body, "X-Shopify-Hmac-Sha256", sig, "X-Shopify-Event-Id", "evt-1", "X-Shopify-Webhook-Id", "wh-1")
	testkit.WantNew(t, resp, rb, http.StatusOK)
	resp, rb2 := testkit.Post(t, url, body, "X-Shopify-Hmac-Sha256", sig, "X-Shopify-Event-Id", "evt-1", "X-Shopify-Webhook-Id", "wh-2")
	testkit.WantReplay(t, resp, rb2, http.StatusOK, string(rb))
	up.WantCalls(t, 1)
}
