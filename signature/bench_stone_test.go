package signature_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// stoneBenchEvent is a 2 KB Stone event.
var stoneBenchEvent = []byte(strings.TrimSuffix(sigtest.StoneEvent, "}") + `,"pad":"` + strings.Repeat("x", 2048-len(sigtest.StoneEvent)-9) + `"}`)

// BenchmarkStoneOpen measures one valid Stone delivery (2 KB event):
// parsing, the RSA-OAEP-256 key decryption with the partner's key,
// AES-256-GCM and the RS256 check. Stone asks partners for RSA-4096 keys
// (Stone Open Banking, "Gerar chaves de acesso"); 2048 bits is the least
// accepted.
func BenchmarkStoneOpen(b *testing.B) {
	signer := sigtest.RSAKey("stone-signer")
	for _, bits := range []int{2048, 4096} {
		b.Run(map[int]string{2048: "rsa2048", 4096: "rsa4096"}[bits], func(b *testing.B) {
			partner, err := rsa.GenerateKey(rand.Reader, bits)
			if err != nil {
				b.Fatal(err)
			}
			v, err := signature.NewStone(partner, stoneKeys{"k": &signer.PublicKey})
			if err != nil {
				b.Fatal(err)
			}
			body := sigtest.StoneDelivery(b, stoneBenchEvent, signer, "k", &partner.PublicKey)
			r := httptest.NewRequest("POST", "/stone", nil)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := v.Open(r, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkStoneBaselineOAEP is the floor of BenchmarkStoneOpen: the one
// RSA-OAEP-256 private-key operation, with the standard library alone.
func BenchmarkStoneBaselineOAEP(b *testing.B) {
	for _, bits := range []int{2048, 4096} {
		b.Run(map[int]string{2048: "rsa2048", 4096: "rsa4096"}[bits], func(b *testing.B) {
			key, err := rsa.GenerateKey(rand.Reader, bits)
			if err != nil {
				b.Fatal(err)
			}
			ct, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, &key.PublicKey, make([]byte, 32), nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := rsa.DecryptOAEP(sha256.New(), nil, key, ct, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
