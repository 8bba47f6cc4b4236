package providers

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Adyen's published vector (adyen-go-api-library,
// src/hmacvalidator/hmacvalidator_test.go: key, expectedSign), for its
// item, whose data to sign is
// `pspReference:originalReference:merchantAccount:reference:1000:EUR:EVENT:true`.
const (
	adyenKey = "DFB1EB5485895CFA84146406857104ABB4CBCABDC8AAF103A624C8F6A3EAAB00"
	adyenSig = "ipnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="
)

// adyenNotification is a standard webhook holding the vector's item,
// with the replacements given.
func adyenNotification(sig string, replace ...string) []byte {
	item := `{"NotificationRequestItem":{"additionalData":{"hmacSignature":"` + sig + `"},` +
		`"amount":{"currency":"EUR","value":1000},"eventCode":"EVENT","eventDate":"2026-12-01T10:00:00+01:00",` +
		`"merchantAccountCode":"merchantAccount","merchantReference":"reference","originalReference":"originalReference",` +
		`"pspReference":"pspReference","success":"true"}}`
	return []byte(strings.NewReplacer(replace...).Replace(`{"live":"false","notificationItems":[` + item + `]}`))
}

func TestAdyen(t *testing.T) {
	v := mustBuild(t, VerifyConfig{Scheme: "adyen", Secrets: []string{adyenKey}})
	post := func() *http.Request { return httptest.NewRequest(http.MethodPost, "/adyen", nil) }
	for _, c := range []struct {
		name string
		body []byte
		want *signature.Error
	}{
		{"Adyen's vector", adyenNotification(adyenSig), nil},
		{"another eventDate (not signed)", adyenNotification(adyenSig, "2026-12-01T10:00:00", "2026-12-02T11:00:00"), nil},
		{"a changed amount", adyenNotification(adyenSig, `"value":1000`, `"value":1001`), signature.ErrInvalid},
		{"success changed", adyenNotification(adyenSig, `"success":"true"`, `"success":"false"`), signature.ErrInvalid},
		{"a changed byte of the reference", adyenNotification(adyenSig, `"reference"`, `"referencE"`), signature.ErrInvalid},
		{"the signature altered", adyenNotification("jpnxGCaUZ4l8TUW75a71/ghd2Fe5ffvX0pV4TLTntIc="), signature.ErrInvalid},
		{"no signature", adyenNotification(adyenSig, `"additionalData":{"hmacSignature":"`+adyenSig+`"},`, ""), signature.ErrMissing},
		{"a forged second item", adyenNotification(adyenSig, `]}`, `,{"NotificationRequestItem":{"additionalData":{"hmacSignature":"`+adyenSig+`"},"pspReference":"other","eventCode":"REFUND","success":"true"}}]}`), signature.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) { sigtest.WantReason(t, v.Verify(post(), c.body), c.want) })
	}
	other := mustBuild(t, VerifyConfig{Scheme: "adyen", Secrets: []string{"44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056"}})
	sigtest.WantReason(t, other.Verify(post(), adyenNotification(adyenSig)), signature.ErrInvalid)
	// the key is hex, as Adyen shows it: one that is not is refused at
	// provision, never taken as raw bytes
	if _, err := buildVerifier(VerifyConfig{Scheme: "adyen", Secrets: []string{"not-hex"}}); err == nil || strings.Contains(err.Error(), "not-hex") {
		t.Fatalf("a key that is not hex: %v", err)
	}

	// the preset's signer writes Adyen's signature into each item
	s, err := NewSigner("adyen", SignConfig{Secret: adyenKey})
	if err != nil {
		t.Fatal(err)
	}
	r := post()
	out, err := s.Sign(r, adyenNotification("unsigned"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"hmacSignature":"`+adyenSig+`"`) {
		t.Fatalf("signed %s", out)
	}
	sigtest.WantReason(t, v.Verify(r, out), nil)

	p := presets["adyen"]
	if p.Success == nil || p.Success.Status != 200 || p.Success.Body != "[accepted]" || p.TTL != 31*day ||
		strings.Join(p.Batch.Key, " ") != "json:NotificationRequestItem.pspReference+json:NotificationRequestItem.eventCode+json:NotificationRequestItem.success body" {
		t.Fatalf("adyen: success %+v ttl %v batch %+v", p.Success, p.TTL, p.Batch)
	}
}
