//go:build porting

package webhookidempotency

import (
	"crypto/rsa"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	gojwt "github.com/golang-jwt/jwt/v5"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
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
	fastStoneKeys(t)
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := newJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	up := newUpstream(t, nil)
	port := freePort(t)
	keyFile := partnerKeyFile(t)
	c := startCaddy(t, "", proxySite(port, stoneDirective(keyFile, jwks.URL, "decrypt"), up))
	url := siteURL(port) + "/stone"
	event := []byte(sigtest.StoneEvent)
	id := "930bbd6d-0c7a-4fe4-8b50-4b82a20cb847"

	// a forged delivery of the same event id is refused and claims nothing
	forged := sigtest.StoneDelivery(t, event, sigtest.RSAKey("stone-forger"), "stone-1", &partner.PublicKey)
	resp, body := post(t, url, forged, "Content-Type", "application/json", "x-stone-webhook-event-id", id)
	wantRejected(t, resp, body, "invalid signature")
	resp, body = post(t, url, event, "Content-Type", "application/json", "x-stone-webhook-event-id", id)
	wantRejected(t, resp, body, "missing signature")
	wantCalls(t, up, 0)

	resp, body = post(t, url, sigtest.StoneDelivery(t, event, signer, "stone-1", &partner.PublicKey),
		"Content-Type", "text/plain", "x-stone-webhook-event-id", id)
	wantNew(t, resp, body, http.StatusOK)
	got := up.requests()[0]
	if string(got.Body) != string(event) {
		t.Fatalf("upstream got %s, want the event", got.Body)
	}
	if got.ContentLength != int64(len(event)) || got.Header.Get("Content-Type") != "application/json" || len(got.TransferEncoding) != 0 {
		t.Fatalf("upstream got Content-Length %d (want %d), Content-Type %q, Transfer-Encoding %v",
			got.ContentLength, len(event), got.Header.Get("Content-Type"), got.TransferEncoding)
	}

	// Stone's retry: the envelope is encrypted anew, the event id is the same
	resp, body2 := post(t, url, sigtest.StoneDelivery(t, event, signer, "stone-1", &partner.PublicKey), "x-stone-webhook-event-id", id)
	wantReplay(t, resp, body2, http.StatusOK, string(body))
	wantCalls(t, up, 1)
	// the event id header is outside the JWS: the same signed event under
	// another id is a replay too (the key's guard is the verified event's)
	resp, body2 = post(t, url, sigtest.StoneDelivery(t, event, signer, "stone-1", &partner.PublicKey), "x-stone-webhook-event-id", "forged-id")
	wantReplay(t, resp, body2, http.StatusOK, string(body))
	wantCalls(t, up, 1)

	// an unchanged reload shares the key set: nothing is fetched
	before := jwks.hits.Load()
	if err := c.reload(proxySite(port, stoneDirective(keyFile, jwks.URL, "decrypt"), up)); err != nil {
		t.Fatal(err)
	}
	another := []byte(strings.Replace(sigtest.StoneEvent, "54abd61c", "64abd61c", 1))
	resp, body = postAfterReload(t, url, sigtest.StoneDelivery(t, another, signer, "stone-1", &partner.PublicKey), "x-stone-webhook-event-id", "another-event")
	wantNew(t, resp, body, http.StatusOK)
	if n := jwks.hits.Load() - before; n != 0 {
		t.Fatalf("an unchanged reload fetched the key set %d times", n)
	}
}

func TestE2EStoneWithoutDecryptPassesTheEnvelope(t *testing.T) {
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := newJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	up := newUpstream(t, nil)
	url := startProxy(t, stoneDirective(partnerKeyFile(t), jwks.URL, ""), up) + "/stone"
	envelope := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey)
	// no event id header: the key is the hash of the verified event, so a
	// re-encrypted retry is still a duplicate
	resp, body := post(t, url, envelope, "Content-Type", "application/json")
	wantNew(t, resp, body, http.StatusOK)
	if got := up.requests()[0]; string(got.Body) != string(envelope) {
		t.Fatalf("upstream got %s, want the envelope as received", got.Body)
	}
	resp, body2 := post(t, url, sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey), "Content-Type", "application/json")
	wantReplay(t, resp, body2, http.StatusOK, string(body))
}

func TestE2EStoneKeySetUnreachableAtStart(t *testing.T) {
	fastStoneKeys(t)
	partner, signer := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer")
	jwks := newJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": signer})
	jwks.set(true, nil)
	// the set is retried every 20ms in this test; slow it so that the 503
	// is seen before the set loads
	stoneKeysRetry = 300 * time.Millisecond
	up := newUpstream(t, nil)
	url := startProxy(t, stoneDirective(partnerKeyFile(t), jwks.URL, ""), up) + "/stone"
	delivery := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), signer, "stone-1", &partner.PublicKey)

	resp, body := post(t, url, delivery, "x-stone-webhook-event-id", "evt-1")
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		string(body) != `{"error":"verification keys unavailable"}` {
		t.Fatalf("before the key set loads: %d %v %s, want 503 with Retry-After", resp.StatusCode, resp.Header, body)
	}
	wantCalls(t, up, 0)
	jwks.set(false, nil)
	eventually(t, 10*time.Second, "delivery accepted once the key set loads", func() (bool, string) {
		resp, body = post(t, url, delivery, "x-stone-webhook-event-id", "evt-1")
		return resp.StatusCode == http.StatusOK, strconv.Itoa(resp.StatusCode) + " " + string(body)
	})
	wantCalls(t, up, 1)
}

func TestE2EStoneUnknownKidThenRotated(t *testing.T) {
	fastStoneKeys(t)
	partner, old, rotated := sigtest.RSAKey("stone-partner"), sigtest.RSAKey("stone-signer"), sigtest.RSAKey("stone-signer-2")
	jwks := newJWKSServer(t, map[string]*rsa.PrivateKey{"stone-1": old})
	up := newUpstream(t, nil)
	url := startProxy(t, stoneDirective(partnerKeyFile(t), jwks.URL, ""), up) + "/stone"
	delivery := sigtest.StoneDelivery(t, []byte(sigtest.StoneEvent), rotated, "stone-2", &partner.PublicKey)
	resp, body := post(t, url, delivery, "x-stone-webhook-event-id", "evt-2")
	wantRejected(t, resp, body, "invalid signature")
	jwks.set(false, map[string]*rsa.PrivateKey{"stone-1": old, "stone-2": rotated})
	eventually(t, 10*time.Second, "the rotated key is fetched", func() (bool, string) {
		resp, body = post(t, url, delivery, "x-stone-webhook-event-id", "evt-2")
		return resp.StatusCode == http.StatusOK, strconv.Itoa(resp.StatusCode) + " " + string(body)
	})
	wantCalls(t, up, 1)
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
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency evolution secret {env.WEBHOOK_TEST_EVOLUTION_JWT_KEY}", up) + "/evolution"
	body := []byte(`{"event":"messages.upsert","instance":"main","data":{"key":{"id":"3EB0C767D26A1D3A0B45"}},"date_time":"2026-01-01T00:00:00.000Z"}`)

	resp, rb := post(t, url, body, "Authorization", "Bearer "+evolutionToken(t, "evo-key", time.Now().Add(-16*time.Minute)))
	wantRejected(t, resp, rb, "timestamp outside tolerance")
	resp, rb = post(t, url, body, "Authorization", "Bearer "+evolutionToken(t, "another-key", time.Now()))
	wantRejected(t, resp, rb, "invalid signature")
	resp, rb = post(t, url, body)
	wantRejected(t, resp, rb, "missing signature")
	wantCalls(t, up, 0)

	token := evolutionToken(t, "evo-key", time.Now())
	resp, rb = post(t, url, body, "Authorization", "Bearer "+token)
	wantNew(t, resp, rb, http.StatusOK)
	// Evolution's retry carries the same token and body
	resp, rb2 := post(t, url, body, "Authorization", "Bearer "+token)
	wantReplay(t, resp, rb2, http.StatusOK, string(rb))
	wantCalls(t, up, 1)
}

func TestE2EEvolutionHeaderToken(t *testing.T) {
	up := newUpstream(t, nil)
	url := startProxy(t, "webhook_idempotency evolution {\n\t\tverify evolution {\n\t\t\theader apikey\n\t\t\tsecret instance-token\n\t\t}\n\t}", up) + "/evolution"
	resp, rb := post(t, url, []byte(`{"event":"connection.update"}`), "apikey", "wrong")
	wantRejected(t, resp, rb, "invalid signature")
	resp, rb = post(t, url, []byte(`{"event":"connection.update"}`), "apikey", "instance-token")
	wantNew(t, resp, rb, http.StatusOK)
}

// Asaas counts a 409 as a failure, and 15 of them pause its queue: the
// preset waits for the first delivery and replays its answer.
func TestE2EAsaasWaitsForInFlight(t *testing.T) {
	release := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, call int64) {
		<-release
		fmt.Fprintf(w, `{"call":%d}`, call)
	})
	url := startProxy(t, "webhook_idempotency asaas secret asaas-token-123", up) + "/asaas"
	body := []byte(`{"id":"evt_05b708f961d739ea7eba7e4db318f621&368604920","event":"PAYMENT_RECEIVED"}`)

	resp, rb := post(t, url, body, "asaas-access-token", "asaas-token-12")
	wantRejected(t, resp, rb, "invalid signature")

	var wg sync.WaitGroup
	var first *http.Response
	var firstBody []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		first, firstBody = post(t, url, body, "asaas-access-token", "asaas-token-123")
	}()
	eventually(t, 10*time.Second, "first delivery reaches the upstream", func() (bool, string) {
		return up.calls.Load() == 1, "not yet"
	})
	var dup *http.Response
	var dupBody []byte
	wg.Add(1)
	go func() {
		defer wg.Done()
		dup, dupBody = post(t, url, body, "asaas-access-token", "asaas-token-123")
	}()
	time.Sleep(100 * time.Millisecond) // the duplicate is waiting, not answered 409
	close(release)
	wg.Wait()
	wantNew(t, first, firstBody, http.StatusOK)
	wantReplay(t, dup, dupBody, http.StatusOK, string(firstBody))
	wantCalls(t, up, 1)
}

// Mercado Pago signs data.id as received: an order id with capital
// letters, through the preset, keyed on the notification id.
func TestE2EMercadoPagoCapitalDataID(t *testing.T) {
	up := newUpstream(t, nil)
	base := startProxy(t, "webhook_idempotency mercadopago secret mp-secret", up)
	body := []byte(`{"id":12345,"type":"order","action":"order.processed","data":{"id":"ORD01JQ4S4KY8HWQ6NA5PXB65B3D3"}}`)
	ts := strconv.FormatInt(time.Now().Add(-2*time.Hour).Unix(), 10) // a retry keeps its first ts
	sign := func(reqID string) string {
		return "ts=" + ts + ",v1=" + sigtest.HMACHex("mp-secret", "id:ORD01JQ4S4KY8HWQ6NA5PXB65B3D3;request-id:"+reqID+";ts:"+ts+";")
	}
	url := base + "/mp?data.id=ORD01JQ4S4KY8HWQ6NA5PXB65B3D3&type=order"
	resp, rb := post(t, url, body, "x-request-id", "req-1", "x-signature", sign("req-1"))
	wantNew(t, resp, rb, http.StatusOK)
	// the retry has a new x-request-id; the notification id is the key
	resp, rb2 := post(t, url, body, "x-request-id", "req-2", "x-signature", sign("req-2"))
	wantReplay(t, resp, rb2, http.StatusOK, string(rb))
	resp, rb = post(t, url, body, "x-request-id", "req-3", "x-signature", sign("req-2"))
	wantRejected(t, resp, rb, "invalid signature")
	wantCalls(t, up, 1)
}

// Shopify's event id is the same across the webhooks of one event; the
// webhook id differs per subscription.
func TestE2EShopifyEventID(t *testing.T) {
	up := newUpstream(t, nil)
	base := startProxy(t, "webhook_idempotency shopify secret shpss_test", up)
	body := []byte(`{"id":820982911946154508}`)
	sig := sigtest.HMACBase64("shpss_test", string(body))
	url := base + "/shopify"
	resp, rb := post(t, url, body, "X-Shopify-Hmac-Sha256", sig, "X-Shopify-Event-Id", "evt-1", "X-Shopify-Webhook-Id", "wh-1")
	wantNew(t, resp, rb, http.StatusOK)
	resp, rb2 := post(t, url, body, "X-Shopify-Hmac-Sha256", sig, "X-Shopify-Event-Id", "evt-1", "X-Shopify-Webhook-Id", "wh-2")
	wantReplay(t, resp, rb2, http.StatusOK, string(rb))
	wantCalls(t, up, 1)
}
