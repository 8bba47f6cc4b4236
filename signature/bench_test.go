package signature_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// BenchmarkVerify measures one valid delivery per scheme, 2 KB body,
// verifier with one secret.
func BenchmarkVerify(b *testing.B) {
	for _, c := range sigtest.Cases() {
		b.Run(c.Label(), func(b *testing.B) {
			v, err := newScheme(c, 0, []string{c.Secrets[0]})
			if err != nil {
				b.Fatal(err)
			}
			c.Body = string(sigtest.BenchBody(c.Scheme))
			d := c.Delivery(b, c.Secrets[0], time.Now())
			if err := v.Verify(d.Req, d.Body); err != nil {
				b.Fatalf("benchmark delivery rejected: %v", err)
			}
			r, body := d.Req, d.Body
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if err := v.Verify(r, body); err != nil {
					b.Fatal(err)
				}
			}
			reportCPU(b, cpu)
		})
	}
}

// BenchmarkVerifyBaseline is the floor every HMAC scheme is measured
// against: one HMAC-SHA256 of the same 2 KB body with the standard library,
// the key set up once, plus a constant-time comparison.
func BenchmarkVerifyBaseline(b *testing.B) {
	body := sigtest.BenchBody("stripe")
	mac := hmac.New(sha256.New, []byte("whsec_baseline"))
	want := make([]byte, 0, sha256.Size)
	mac.Write(body)
	want = mac.Sum(want)
	sum := make([]byte, 0, sha256.Size)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu := cpuTime()
	for i := 0; i < b.N; i++ {
		mac.Reset()
		mac.Write(body)
		if !hmac.Equal(mac.Sum(sum[:0]), want) {
			b.Fatal("mismatch")
		}
	}
	reportCPU(b, cpu)
}

// BenchmarkVerifyRejectForged measures the cost of turning a forged
// delivery away, the path a flood takes.
func BenchmarkVerifyRejectForged(b *testing.B) {
	v := signature.NewStripe([]string{"whsec_a", "whsec_b"}, 5*time.Minute)
	body := sigtest.BenchBody("stripe")
	r, _ := http.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
	r.Header.Set("Stripe-Signature", "t="+sigtest.Unix(time.Now())+strings.Repeat(",v1="+strings.Repeat("ab", 32), 16))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if v.Verify(r, body) == nil {
			b.Fatal("accepted")
		}
	}
}

// cpuTime is the process's CPU time so far, user and system, as
// internal/testkit's CPUTime (which would bring Caddy into this package's
// tests).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportCPU reports the process's CPU time per op since cpu, as
// cpu-ns/op: on a shared machine the cost of the work, where the wall
// time also counts the waits for a core.
func reportCPU(b *testing.B, cpu time.Duration) {
	b.ReportMetric(float64(cpuTime()-cpu)/float64(b.N), "cpu-ns/op")
}
