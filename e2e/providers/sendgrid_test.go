package providers_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sendgrid/sendgrid-go/helpers/eventwebhook"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// TestSendGridBatchesThroughCaddy: SendGrid's Event Webhook posts an array
// of events, each with its sg_event_id, and documents duplicates across
// requests. Through a real Caddy with the sendgrid preset (its default
// batch), a batch retried with another composition (events 1–3, then 2–5)
// hands the application 1–5 each once, in the provider's own array holding
// only the new events; a batch of seen events is answered without the
// application. Every request is signed with a P-256 key of the test's, as
// SendGrid signs with its own, and sendgrid-go's verifier (the oracle)
// accepts each one before it is sent.
func TestSendGridBatchesThroughCaddy(t *testing.T) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, _ := x509.MarshalPKIXPublicKey(&priv.PublicKey)
	verificationKey := base64.StdEncoding.EncodeToString(der)
	oracleKey, err := eventwebhook.ConvertPublicKeyBase64ToECDSA(verificationKey)
	if err != nil {
		t.Fatal(err)
	}

	up := testkit.NewUpstream(t, nil)
	_, base := proxy(t, "webhook_idempotency sendgrid {\n\t\tpublic_key "+verificationKey+"\n\t}", up)
	url := base + "/sendgrid"

	item := func(n int) string {
		return `{"email":"user` + strconv.Itoa(n) + `@example.com","event":"delivered","sg_event_id":"c2ctZXZlbnQt` + strconv.Itoa(n) +
			`","sg_message_id":"msg.` + strconv.Itoa(n) + `","timestamp":1765000000}`
	}
	batch := func(ns ...int) []byte {
		items := make([]string, len(ns))
		for i, n := range ns {
			items[i] = item(n)
		}
		return []byte("[" + strings.Join(items, ",") + "]\r\n")
	}
	post := func(body []byte) (*http.Response, []byte) {
		t.Helper()
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		digest := sha256.Sum256(append([]byte(ts), body...))
		sig, err := ecdsa.SignASN1(rand.Reader, priv, digest[:])
		if err != nil {
			t.Fatal(err)
		}
		sig64 := base64.StdEncoding.EncodeToString(sig)
		if ok, err := eventwebhook.VerifySignature(oracleKey, body, sig64, ts); err != nil || !ok {
			t.Fatalf("sendgrid-go refuses the test's signature: %v", err)
		}
		return testkit.Post(t, url, body, "Content-Type", "application/json",
			eventwebhook.VerificationHTTPHeader, sig64, eventwebhook.TimestampHTTPHeader, ts)
	}

	resp, got := post(batch(1, 2, 3))
	testkit.WantNew(t, resp, got, http.StatusOK)
	resp, got = post(batch(2, 3, 4, 5))
	testkit.WantNew(t, resp, got, http.StatusOK)
	resp, got = post(batch(5, 1))
	if resp.StatusCode != http.StatusOK || resp.Header.Get(testkit.ReplayedHeader) != "true" {
		t.Fatalf("a batch of seen events: %s %s=%q %s", resp.Status, testkit.ReplayedHeader, resp.Header.Get(testkit.ReplayedHeader), got)
	}
	// a forgery is refused before anything is claimed
	forged := batch(6)
	resp, got = testkit.Post(t, url, forged, "Content-Type", "application/json",
		eventwebhook.VerificationHTTPHeader, "MEUCIQDv", eventwebhook.TimestampHTTPHeader, "1765000000")
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("a forged batch: %s %s", resp.Status, got)
	}

	reqs := up.Requests()
	if len(reqs) != 2 {
		t.Fatalf("the application got %d requests, want 2", len(reqs))
	}
	var seen []string
	for i, want := range []string{string(batch(1, 2, 3)), string(batch(4, 5))} {
		r := reqs[i]
		if string(r.Body) != want {
			t.Errorf("request %d: the application got\n%s\nwant\n%s", i+1, r.Body, want)
		}
		if r.ContentLength != int64(len(want)) {
			t.Errorf("request %d: Content-Length %d, want %d", i+1, r.ContentLength, len(want))
		}
		// SendGrid's signature cannot be made anew: with a batch it is
		// stripped, never passed on over a body it no longer matches
		if r.Header.Get(eventwebhook.VerificationHTTPHeader) != "" {
			t.Errorf("request %d carries SendGrid's signature over an envelope SendGrid did not sign", i+1)
		}
		var events []struct {
			ID string `json:"sg_event_id"`
		}
		if err := json.Unmarshal(r.Body, &events); err != nil {
			t.Fatalf("request %d: %v", i+1, err)
		}
		for _, e := range events {
			seen = append(seen, e.ID)
		}
	}
	want := []string{"c2ctZXZlbnQt1", "c2ctZXZlbnQt2", "c2ctZXZlbnQt3", "c2ctZXZlbnQt4", "c2ctZXZlbnQt5"}
	if !slices.Equal(seen, want) {
		t.Errorf("the application got events %v, want each of %v once", seen, want)
	}
}
