package providers

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Wise's published example (transferwise/digital-signatures-examples at
// c29c3625, verify-webhook-signature/verify-signature.js): a sandbox
// delivery, its X-Signature-SHA256 and Wise's sandbox public key, checked
// there with `crypto.verify('RSA-SHA256', body, {padding:
// RSA_PKCS1_PADDING}, signature)`.
const (
	wiseSandboxKey = `-----BEGIN PUBLIC KEY-----
MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAwpb91cEYuyJNQepZAVfP
ZIlPZfNUefH+n6w9SW3fykqKu938cR7WadQv87oF2VuT+fDt7kqeRziTmPSUhqPU
ys/V2Q1rlfJuXbE+Gga37t7zwd0egQ+KyOEHQOpcTwKmtZ81ieGHynAQzsn1We3j
wt760MsCPJ7GMT141ByQM+yW1Bx+4SG3IGjXWyqOWrcXsxAvIXkpUD/jK/L958Cg
nZEgz0BSEh0QxYLITnW1lLokSx/dTianWPFEhMC9BgijempgNXHNfcVirg1lPSyg
z7KqoKUN0oHqWLr2U1A+7kqrl6O2nx3CKs1bj1hToT1+p4kcMoHXA7kA+VBLUpEs
VwIDAQAB
-----END PUBLIC KEY-----`
	wiseBody      = `{"data":{"resource":{"id":49983981,"profile_id":16055450,"account_id":14124090,"type":"transfer"},"current_state":"incoming_payment_waiting","previous_state":null,"occurred_at":"2021-08-23T10:12:50Z"},"subscription_id":"90aa8e14-4ef1-4a56-861c-f3c9cde097ea","event_type":"transfers#state-change","schema_version":"2.0.0","sent_at":"2021-08-23T10:12:50Z"}`
	wiseSignature = "wKcKCYXAzxNgiu7xmoDm943NUni7Rz33QN8JkEA9dWSGebgndonabgSj18Y4C08OrwVmueGsED2s00M7DtJVcYKOS1i3G4TMVx+mgM3aL9djMBkQtiYNBFUd6wrPI7ZUNHv/TrlKSjTMc+6JFvUvJ7owY3z85e3I4jLRLJowMFvO8kvCJ60+1pY9wDwZvtZ//WS93LrwGjk9Dvwzpmu0w+P4J75tETT5qC3Uv0y5G2yO8SEoO3yNP/tg/BOli02niHb53vEOUWUb9bly6thnfMoXoiV/osoGxgF20R58RlvkAmezyyl1Sv542TfS2DpiwVnmjjjkCyXeSUcKookYLQ=="
)

func TestWise(t *testing.T) {
	body := []byte(wiseBody)
	rt := route{publicKeys: []string{wiseSandboxKey}}
	rt.check(t, "wise", post("X-Signature-SHA256", wiseSignature), body, nil)
	rt.check(t, "wise", post("X-Signature-SHA256", wiseSignature), changeByte(body), signature.ErrInvalid)
	rt.check(t, "wise", post("X-Signature-SHA256", strings.Replace(wiseSignature, "wKc", "wKd", 1)), body, signature.ErrInvalid)
	// another key's signature of the same body
	other := sigtest.RSAKey("not-wise")
	digest := sha256.Sum256(body)
	sig, err := rsa.SignPKCS1v15(rand.Reader, other, crypto.SHA256, digest[:])
	if err != nil {
		t.Fatal(err)
	}
	rt.check(t, "wise", post("X-Signature-SHA256", base64.StdEncoding.EncodeToString(sig)), body, signature.ErrInvalid)
	// rotation: the other key beside Wise's
	route{publicKeys: []string{sigtest.PEMPublic(&other.PublicKey), wiseSandboxKey}}.check(t, "wise", post("X-Signature-SHA256", wiseSignature), body, nil)
	// no key of Wise's is built in: a route must give one
	if err := checkKeyMaterial(VerifyConfig{Scheme: "wise"}); err == nil || !strings.Contains(err.Error(), "public_key") {
		t.Fatalf("wise without public_key: %v", err)
	}
	if err := checkKeyMaterial(VerifyConfig{Scheme: "wise", Secrets: []string{"s"}}); err == nil {
		t.Fatal("wise with a secret")
	}
}
