package signature

import (
	"crypto"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/tidwall/gjson"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/query"
)

// Signing: the counterpart of each scheme's Verifier, for the tools and
// tests that send deliveries as a provider does (the module's
// `caddy webhook-idempotency send`). A Signer follows the same
// documentation as its verifier, and a delivery it signs passes that
// verifier.

// Signer signs deliveries as a provider does.
type Signer interface {
	// Sign signs the delivery of body in r, made at the time at: it sets
	// the headers the provider sends with it (the signature, and the
	// timestamp and ids the signature covers) and returns the body to
	// send, which is body unless the provider signs a body of its own
	// making (Linear's webhookTimestamp, Stone's encrypted envelope). An
	// id the signature covers that r does not carry yet is made up, as a
	// provider assigns one. Sign may add to r's query (Twilio's
	// bodySHA256 for a JSON body). It does not read r.Body.
	Sign(r *http.Request, body []byte, at time.Time) ([]byte, error)
}

// SignerFunc is a function that is a Signer.
type SignerFunc func(r *http.Request, body []byte, at time.Time) ([]byte, error)

// Sign implements Signer.
func (f SignerFunc) Sign(r *http.Request, body []byte, at time.Time) ([]byte, error) {
	return f(r, body, at)
}

// hmacSum is the HMAC of the concatenated parts.
func hmacSum(newHash func() hash.Hash, key []byte, parts ...[]byte) []byte {
	m := hmac.New(newHash, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// encode writes a signature as enc says.
func encode(enc Encoding, sig []byte) string {
	if enc == Base64 {
		return base64.StdEncoding.EncodeToString(sig)
	}
	return hex.EncodeToString(sig)
}

// unix is t in Unix seconds.
func unix(t time.Time) string { return strconv.FormatInt(t.Unix(), 10) }

// randomID returns prefix and 16 random bytes in hex.
func randomID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// idHeader returns the value of the id header of r, setting a made-up one
// first when r has none.
func idHeader(r *http.Request, name, prefix string) string {
	id := r.Header.Get(name)
	if id == "" {
		id = randomID(prefix)
		r.Header.Set(name, id)
	}
	return id
}

// NewStripeSigner signs as Stripe does (NewStripe): `Stripe-Signature:
// t=<ts>,v1=<hex>`, the HMAC-SHA256 of `{t}.{body}` keyed with the
// endpoint's signing secret as written.
func NewStripeSigner(secret string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		ts := unix(at)
		r.Header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(hmacSum(sha256.New, []byte(secret), []byte(ts+"."), body)))
		return body, nil
	})
}

// NewPaddleSigner signs as Paddle Billing does (NewPaddle):
// `Paddle-Signature: ts=<ts>;h1=<hex>`, the HMAC-SHA256 of `{ts}:{body}`.
func NewPaddleSigner(secret string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		ts := unix(at)
		r.Header.Set("Paddle-Signature", "ts="+ts+";h1="+hex.EncodeToString(hmacSum(sha256.New, []byte(secret), []byte(ts+":"), body)))
		return body, nil
	})
}

// NewSlackSigner signs as Slack does (NewSlack): `X-Slack-Signature:
// v0=<hex>`, the HMAC-SHA256 of `v0:{ts}:{body}`, and the timestamp in
// `X-Slack-Request-Timestamp`.
func NewSlackSigner(secret string) Signer {
	return newV0Signer("X-Slack-Signature", "X-Slack-Request-Timestamp", secret)
}

// NewZoomSigner signs as Zoom does (NewZoom): Slack's formula in
// `x-zm-signature` and `x-zm-request-timestamp`.
func NewZoomSigner(secret string) Signer {
	return newV0Signer("X-Zm-Signature", "X-Zm-Request-Timestamp", secret)
}

func newV0Signer(sigHeader, tsHeader, secret string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		ts := unix(at)
		r.Header.Set(tsHeader, ts)
		r.Header.Set(sigHeader, "v0="+hex.EncodeToString(hmacSum(sha256.New, []byte(secret), []byte("v0:"+ts+":"), body)))
		return body, nil
	})
}

// NewStandardWebhooksSigner signs as Standard Webhooks' `v1` (and Svix)
// does (NewStandardWebhooks), on the headers named with headerPrefix
// (`webhook-`, `svix-`): `{prefix}signature: v1,<base64>`, the HMAC-SHA256
// of `{id}.{timestamp}.{body}` keyed with the base64-decoded secret
// (`whsec_` and base64). The message id is r's `{prefix}id`, made up
// (`msg_…`) when r has none.
func NewStandardWebhooksSigner(headerPrefix, secret string) (Signer, error) {
	key, err := decodeWhsec(secret)
	if err != nil || len(key) == 0 {
		return nil, errors.New("the secret is not a Standard Webhooks secret (whsec_ followed by base64)")
	}
	// one HMAC state per signature at a time, reset and reused: the
	// key's padding is hashed once, not at every attempt
	macs := &sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}
	return standardSigner(headerPrefix, func(id, ts string, body []byte) string {
		mac := macs.Get().(hash.Hash)
		mac.Reset()
		_, _ = io.WriteString(mac, id)
		_, _ = mac.Write(dot)
		_, _ = io.WriteString(mac, ts)
		_, _ = mac.Write(dot)
		_, _ = mac.Write(body)
		var sum [sha256.Size]byte
		sig := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(sum[:0]))
		macs.Put(mac)
		return sig
	}), nil
}

// dot separates the parts of what Standard Webhooks signs.
var dot = []byte{'.'}

// NewStandardWebhooksEd25519Signer signs as Standard Webhooks' asymmetric
// `v1a` does: `{prefix}signature: v1a,<base64>`, the Ed25519 signature of
// `{id}.{timestamp}.{body}`.
func NewStandardWebhooksEd25519Signer(headerPrefix string, key ed25519.PrivateKey) Signer {
	return standardSigner(headerPrefix, func(id, ts string, body []byte) string {
		msg := make([]byte, 0, len(id)+len(ts)+len(body)+2)
		msg = append(append(append(append(append(msg, id...), '.'), ts...), '.'), body...)
		return "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(key, msg))
	})
}

// standardSigner sets a Standard Webhooks request's timestamp and its
// signature, sign's of `{id}.{timestamp}.{body}`.
func standardSigner(prefix string, sign func(id, ts string, body []byte) string) Signer {
	idName, tsName, sigName := prefix+"id", prefix+"timestamp", prefix+"signature"
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		id := idHeader(r, idName, "msg_")
		ts := unix(at)
		r.Header.Set(tsName, ts)
		r.Header.Set(sigName, sign(id, ts, body))
		return body, nil
	})
}

// NewHMACSigner signs as the generic HMAC scheme checks (NewHMAC): the
// HMAC of the raw body with h, written with enc after prefix in the named
// header. GitHub and Meta (`X-Hub-Signature-256`, `sha256=`, hex), iFood
// (`X-IFood-Signature`, hex) and Razorpay (`X-Razorpay-Signature`, hex)
// sign so with SHA-256.
func NewHMACSigner(header, prefix string, h crypto.Hash, enc Encoding, secret string) (Signer, error) {
	if header == "" {
		return nil, errors.New("no header name")
	}
	if !h.Available() {
		return nil, fmt.Errorf("hash %v is not available", h)
	}
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		r.Header.Set(header, prefix+encode(enc, hmacSum(h.New, []byte(secret), body)))
		return body, nil
	}), nil
}

// NewShopifySigner signs as Shopify's webhooks do (NewShopify):
// `X-Shopify-Hmac-Sha256`, the HMAC-SHA256 of the body in base64.
func NewShopifySigner(secret string) Signer {
	s, _ := NewHMACSigner("X-Shopify-Hmac-Sha256", "", crypto.SHA256, Base64, secret)
	return s
}

// NewLinearSigner signs as Linear does (NewLinear): it sets the body's
// `webhookTimestamp` (Unix milliseconds, inserted first in the JSON object
// when the body has none) and puts the HMAC-SHA256 hex of that body in
// `Linear-Signature`.
func NewLinearSigner(secret string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		ms := strconv.FormatInt(at.UnixMilli(), 10)
		if ts := gjson.GetBytes(body, "webhookTimestamp"); ts.Exists() && ts.Index > 0 {
			body = append(append(append([]byte(nil), body[:ts.Index]...), ms...), body[ts.Index+len(ts.Raw):]...)
		} else {
			i := strings.IndexByte(string(body), '{')
			if i < 0 || !gjson.ValidBytes(body) {
				return nil, errors.New("linear signs a JSON object body, with its webhookTimestamp")
			}
			field := `"webhookTimestamp":` + ms
			if rest := strings.TrimSpace(string(body[i+1:])); !strings.HasPrefix(rest, "}") {
				field += ","
			}
			body = append(append(append([]byte(nil), body[:i+1]...), field...), body[i+1:]...)
		}
		r.Header.Set("Linear-Signature", hex.EncodeToString(hmacSum(sha256.New, []byte(secret), body)))
		return body, nil
	})
}

// NewTwitchSigner signs as Twitch EventSub does (NewTwitch):
// `Twitch-Eventsub-Message-Signature: sha256=<hex>`, the HMAC-SHA256 of
// `{message id}{timestamp}{body}`, with the timestamp in RFC 3339 and the
// message type `notification` unless r names another. The message id is
// r's `Twitch-Eventsub-Message-Id`, made up when r has none.
func NewTwitchSigner(secret string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		id := idHeader(r, "Twitch-Eventsub-Message-Id", "")
		ts := at.UTC().Format(time.RFC3339Nano)
		r.Header.Set("Twitch-Eventsub-Message-Timestamp", ts)
		if r.Header.Get("Twitch-Eventsub-Message-Type") == "" {
			r.Header.Set("Twitch-Eventsub-Message-Type", "notification")
		}
		r.Header.Set("Twitch-Eventsub-Message-Signature", "sha256="+hex.EncodeToString(hmacSum(sha256.New, []byte(secret), []byte(id+ts), body)))
		return body, nil
	})
}

// NewMercadoPagoSigner signs as Mercado Pago does (NewMercadoPago):
// `x-signature: ts=<ts>,v1=<hex>`, the HMAC-SHA256 of the manifest
// `id:{data.id};request-id:{x-request-id};ts:{ts};`, data.id taken from
// r's query (left out when absent) and the request id from r's
// `x-request-id`, made up when r has none.
func NewMercadoPagoSigner(secret string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		reqID := idHeader(r, "X-Request-Id", "")
		ts := unix(at)
		manifest := appendMercadoPagoManifest(nil, query.Value(r.URL.RawQuery, "data.id"), reqID, ts)
		r.Header.Set("X-Signature", "ts="+ts+",v1="+hex.EncodeToString(hmacSum(sha256.New, []byte(secret), manifest)))
		return body, nil
	})
}

// NewPagBankSigner signs as PagBank does (NewPagBank):
// `x-authenticity-token`, the SHA-256 hex of `{token}-{body}`.
func NewPagBankSigner(token string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		h := sha256.New()
		h.Write([]byte(token + "-"))
		h.Write(body)
		r.Header.Set("X-Authenticity-Token", hex.EncodeToString(h.Sum(nil)))
		return body, nil
	})
}

// publicURLOf is the URL a provider signs for r: publicURL (with r's
// query when it has none of its own), else r's URL.
func publicURLOf(r *http.Request, publicURL string) string {
	if publicURL == "" {
		return r.URL.String()
	}
	if !strings.Contains(publicURL, "?") && r.URL.RawQuery != "" {
		return publicURL + "?" + r.URL.RawQuery
	}
	return publicURL
}

// NewTwilioSigner signs as Twilio does with an account's auth token
// (NewTwilio): `X-Twilio-Signature`, the HMAC-SHA1 in base64 of the public
// URL followed by the form parameters sorted by name, each as name then
// value. A body that is not form-encoded (JSON) is signed as Twilio signs
// it: its SHA-256 hex goes in the URL's `bodySHA256` query parameter, and
// the URL alone is signed. publicURL is the URL configured at Twilio (the
// route's `url`), "" for r's own URL.
func NewTwilioSigner(secret, publicURL string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		var params url.Values
		trimmed := strings.TrimSpace(string(body))
		isJSON := strings.Contains(r.Header.Get("Content-Type"), "json") || strings.HasPrefix(trimmed, "{") || strings.HasPrefix(trimmed, "[")
		if !isJSON {
			form, err := url.ParseQuery(string(body))
			if err != nil {
				return nil, fmt.Errorf("twilio signs a form-encoded or a JSON body: %v", err)
			}
			params = form
		} else {
			sum := sha256.Sum256(body)
			q := r.URL.Query()
			q.Set("bodySHA256", hex.EncodeToString(sum[:]))
			r.URL.RawQuery = q.Encode()
		}
		msg := publicURLOf(r, publicURL)
		names := make([]string, 0, len(params))
		for name := range params {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			values := append([]string(nil), params[name]...)
			sort.Strings(values)
			for _, v := range values {
				msg += name + v
			}
		}
		r.Header.Set("X-Twilio-Signature", base64.StdEncoding.EncodeToString(hmacSum(sha1.New, []byte(secret), []byte(msg))))
		return body, nil
	})
}

// NewSquareSigner signs as Square does (NewSquare):
// `x-square-hmacsha256-signature`, the HMAC-SHA256 in base64 of the
// notification URL followed by the body. publicURL is the subscription's
// notification URL (the route's `url`), "" for r's own URL.
func NewSquareSigner(secret, publicURL string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		r.Header.Set("X-Square-Hmacsha256-Signature", base64.StdEncoding.EncodeToString(hmacSum(sha256.New, []byte(secret), []byte(publicURLOf(r, publicURL)), body)))
		return body, nil
	})
}

// NewHubSpotSigner signs as HubSpot's v3 does (NewHubSpot):
// `X-HubSpot-Signature-v3`, the HMAC-SHA256 in base64 of
// `{method}{url}{body}{timestamp}`, the URL with HubSpot's escapes
// decoded and the timestamp in milliseconds in
// `X-HubSpot-Request-Timestamp`. publicURL is the app's target URL (the
// route's `url`), "" for r's own URL.
func NewHubSpotSigner(secret, publicURL string) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		ts := strconv.FormatInt(at.UnixMilli(), 10)
		u := decodeHubSpotURL([]byte(publicURLOf(r, publicURL)), 0)
		r.Header.Set("X-Hubspot-Request-Timestamp", ts)
		r.Header.Set("X-Hubspot-Signature-V3", base64.StdEncoding.EncodeToString(hmacSum(sha256.New, []byte(secret), []byte(r.Method), u, body, []byte(ts))))
		return body, nil
	})
}

// NewTokenSigner sends a token as the generic token scheme checks
// (NewToken): the named header carries prefix and the token. Asaas
// (`asaas-access-token`) and GitLab's secret token (`X-Gitlab-Token`)
// send theirs so.
func NewTokenSigner(header, prefix, token string) (Signer, error) {
	if header == "" {
		return nil, errors.New("no header name")
	}
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		r.Header.Set(header, prefix+token)
		return body, nil
	}), nil
}

// NewGitLabSigner signs as GitLab does (NewGitLab): a signing token
// (`whsec_…`) signs as Standard Webhooks on the `webhook-` headers, any
// other secret is sent as it is in `X-Gitlab-Token`.
func NewGitLabSigner(secret string) (Signer, error) {
	if strings.HasPrefix(secret, "whsec_") {
		return NewStandardWebhooksSigner("webhook-", secret)
	}
	return NewTokenSigner("X-Gitlab-Token", "", secret)
}

// JWTLifetime is how long the tokens of NewJWTSigner are valid: Evolution
// API issues tokens for 10 minutes.
const JWTLifetime = 10 * time.Minute

// NewJWTSigner sends a JSON Web Token as the JWT scheme checks (NewJWT):
// HS256 under secret, with `iat` the signing time, `exp` JWTLifetime
// later, and the claims of extra, in the named header (Authorization when
// empty) after prefix (DefaultJWTPrefix when empty). Evolution API's
// tokens carry `{"app":"evolution","action":"webhook"}`.
func NewJWTSigner(header, prefix, secret string, extra map[string]any) (Signer, error) {
	if secret == "" {
		return nil, errors.New("no secret")
	}
	if header == "" {
		header = "Authorization"
	}
	if prefix == "" {
		prefix = DefaultJWTPrefix
	}
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		claims := jwt.MapClaims{"iat": at.Unix(), "exp": at.Add(JWTLifetime).Unix()}
		for k, v := range extra {
			claims[k] = v
		}
		token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
		if err != nil {
			return nil, err
		}
		r.Header.Set(header, prefix+token)
		return body, nil
	}), nil
}

// NewDiscordSigner signs as Discord does (NewDiscord):
// `X-Signature-Ed25519`, the hex of the Ed25519 signature of
// `{timestamp}{body}` made with the application's key, and the timestamp
// in `X-Signature-Timestamp`. Discord alone holds its applications' keys:
// a route checks this signer's deliveries when its public_key is the
// public half of key.
func NewDiscordSigner(key ed25519.PrivateKey) Signer {
	return SignerFunc(func(r *http.Request, body []byte, at time.Time) ([]byte, error) {
		ts := unix(at)
		r.Header.Set("X-Signature-Timestamp", ts)
		r.Header.Set("X-Signature-Ed25519", hex.EncodeToString(ed25519.Sign(key, append([]byte(ts), body...))))
		return body, nil
	})
}

// NewEd25519Signer signs as the generic Ed25519 scheme checks
// (NewEd25519): the Ed25519 signature of the raw body, written with enc
// after prefix in the named header.
func NewEd25519Signer(header, prefix string, enc Encoding, key ed25519.PrivateKey) Signer {
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		r.Header.Set(header, prefix+encode(enc, ed25519.Sign(key, body)))
		return body, nil
	})
}

// NewRSASigner signs as the generic RSA scheme checks (NewRSA): an RSA
// signature of the hash h of the raw body with the padding, written with
// enc after prefix in the named header. Woovi signs so
// (`x-webhook-signature`, SHA-256, PKCS #1 v1.5, base64) with a key only
// Woovi holds: a route checks this signer's deliveries when its
// public_key is the public half of key.
func NewRSASigner(header, prefix string, h crypto.Hash, padding RSAPadding, enc Encoding, key *rsa.PrivateKey) (Signer, error) {
	if h != crypto.SHA256 && h != crypto.SHA512 {
		return nil, fmt.Errorf("hash %v: want SHA-256 or SHA-512", h)
	}
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		d := h.New()
		d.Write(body)
		var sig []byte
		var err error
		if padding == PSS {
			sig, err = rsa.SignPSS(rand.Reader, key, h, d.Sum(nil), &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthEqualsHash})
		} else {
			sig, err = rsa.SignPKCS1v15(rand.Reader, key, h, d.Sum(nil))
		}
		if err != nil {
			return nil, err
		}
		r.Header.Set(header, prefix+encode(enc, sig))
		return body, nil
	}), nil
}

// NewWooviSigner signs as Woovi does (NewWoovi): `x-webhook-signature`,
// the base64 of an RSA-SHA256 (PKCS #1 v1.5) signature of the body.
func NewWooviSigner(key *rsa.PrivateKey) Signer {
	s, _ := NewRSASigner("X-Webhook-Signature", "", crypto.SHA256, PKCS1v15, Base64, key)
	return s
}
