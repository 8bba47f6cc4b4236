package signature_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"net/http/httptest"
	"runtime"
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

// BenchmarkStoneOpenLarge measures the memory one large Stone delivery
// costs, genuine and forged (a JWE anyone can encrypt to the partner's
// public key, around a JWS signed by another key): B/op over the body's
// size is what a request costs beyond its buffered body.
func BenchmarkStoneOpenLarge(b *testing.B) {
	signer := sigtest.RSAKey("stone-signer")
	forger := sigtest.RSAKey("stone-forger")
	partner := sigtest.RSAKey("stone-partner")
	v, err := signature.NewStone(partner, stoneKeys{"k": &signer.PublicKey})
	if err != nil {
		b.Fatal(err)
	}
	event := []byte(`{"id":"evt","pad":"` + strings.Repeat("x", 1<<20) + `"}`)
	for _, c := range []struct {
		name string
		by   *rsa.PrivateKey
		want error
	}{{"genuine", signer, nil}, {"forged", forger, signature.ErrInvalid}} {
		b.Run(c.name, func(b *testing.B) {
			body := sigtest.StoneDelivery(b, event, c.by, "k", &partner.PublicKey)
			r := httptest.NewRequest("POST", "/stone", nil)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := v.Open(r, body); err != c.want {
					b.Fatalf("Open: %v, want %v", err, c.want)
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			perOp := float64(after.TotalAlloc-before.TotalAlloc) / float64(b.N)
			b.ReportMetric(perOp/float64(len(body)), "alloc/body-byte")
		})
	}
}
