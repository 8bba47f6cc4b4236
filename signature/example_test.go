package signature_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// stripeSignature signs body as Stripe does, for the examples.
func stripeSignature(secret, body string) string {
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(m.Sum(nil))
}

// squareSignature signs body as Square does, for the examples.
func squareSignature(key, notificationURL, body string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(notificationURL + body))
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// A handler that passes on only the deliveries Stripe signed.
func ExampleNewStripe() {
	v := signature.NewStripe([]string{"whsec_example"}, 0)
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			http.Error(w, "cannot read body", http.StatusBadRequest)
			return
		}
		if err := v.Verify(r, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		fmt.Fprintln(w, "ok")
	})

	body := `{"id":"evt_1"}`
	for _, sig := range []string{
		stripeSignature("whsec_example", body),
		stripeSignature("whsec_forged", body),
		"",
	} {
		r := httptest.NewRequest(http.MethodPost, "/stripe", strings.NewReader(body))
		if sig != "" {
			r.Header.Set("Stripe-Signature", sig)
		}
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Print(w.Code, " ", w.Body.String())
	}
	// Output:
	// 200 ok
	// 401 invalid signature
	// 401 missing signature
}

// A PublicURL for a server that knows the URL the provider delivers to.
func ExamplePublicURL() {
	const notificationURL = "https://hooks.example.com/square"
	publicURL := func(dst []byte, r *http.Request) []byte {
		dst = append(dst, notificationURL...)
		if r.URL.RawQuery != "" {
			dst = append(append(dst, '?'), r.URL.RawQuery...)
		}
		return dst
	}
	v := signature.NewSquare([]string{"square-signature-key"}, publicURL)

	body := `{"event_id":"6a8f5f28"}`
	r := httptest.NewRequest(http.MethodPost, "http://10.0.0.7:8080/square", strings.NewReader(body))
	r.Header.Set("X-Square-Hmacsha256-Signature", squareSignature("square-signature-key", notificationURL, body))
	fmt.Println(v.Verify(r, []byte(body)))
	// Output: <nil>
}
