// Package signature verifies the signatures webhook providers put on their
// deliveries: Stripe, Paddle, Slack, Standard Webhooks (and Svix) with
// secrets or public keys, Mercado Pago, PagBank, Twilio, Square, Shopify,
// GitLab, Twitch, Zoom, Linear, HubSpot, Discord, Woovi and Stone, JSON Web
// Tokens (Evolution API), and the generic schemes that sign the raw body
// with an HMAC (GitHub, Meta, iFood, Razorpay, …), an Ed25519 or an RSA
// key, or send a shared token.
//
// A Verifier checks one request against its raw body, before the body is
// parsed. Verifiers are safe for concurrent use, compare in constant time,
// accept a signature made with any of their secrets or public keys
// (rotation), and allocate nothing per request, except Twilio's (which
// parses the form body), Mercado Pago's (which reads the body's JSON), the
// RSA schemes (whose arithmetic allocates), the JWT scheme (Evolution API)
// and Stone's (JWE and JWS). Every failure is one of ErrMissing,
// ErrInvalid, ErrTimestamp, ErrUnavailable and ErrAmbiguous, whose Reason can
// be shown to the sender; no error ever contains a secret. Public keys are
// parsed with ParseEd25519PublicKey and ParseRSAPublicKey.
//
// The package has no dependency on any web framework:
//
//	v := signature.NewStripe([]string{os.Getenv("STRIPE_WEBHOOK_SECRET")}, 0)
//	http.HandleFunc("/stripe", func(w http.ResponseWriter, r *http.Request) {
//		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
//		if err != nil {
//			http.Error(w, "cannot read body", http.StatusBadRequest)
//			return
//		}
//		if err := v.Verify(r, body); err != nil {
//			http.Error(w, err.Error(), http.StatusUnauthorized)
//			return
//		}
//		// body is authentic
//	})
package signature

import (
	"net/http"
	"time"
)

// Verifier checks the signature of a request on its raw body.
type Verifier interface {
	// Verify returns nil when the request is authentic, else one of
	// ErrMissing, ErrInvalid, ErrTimestamp and ErrUnavailable. It does
	// not modify the request or the body, and does not read r.Body:
	// body is the raw body, read by the caller.
	Verify(r *http.Request, body []byte) error
}

// Error is a failed verification.
type Error struct {
	// Reason is a short phrase safe to show the sender.
	Reason string
}

func (e *Error) Error() string { return e.Reason }

var _ error = (*Error)(nil)

// The errors Verify returns.
var (
	// ErrMissing means a header the scheme needs is absent, empty or
	// blank, for every scheme alike.
	ErrMissing = &Error{Reason: "missing signature"}

	// ErrInvalid means the signature matches under none of the
	// secrets, or a header cannot be parsed.
	ErrInvalid = &Error{Reason: "invalid signature"}

	// ErrTimestamp means the signed timestamp is further in the past,
	// or in the future, than the tolerance allows.
	ErrTimestamp = &Error{Reason: "timestamp outside tolerance"}

	// ErrUnavailable means the request cannot be verified now: the keys
	// it needs are not loaded yet (Stone's key set while it cannot be
	// fetched). It is no verdict on the request, which the sender should
	// retry later (the module answers 503 with Retry-After).
	ErrUnavailable = &Error{Reason: "verification keys unavailable"}

	// ErrAmbiguous means the body gives a JSON member the scheme reads
	// more than once (Stone's envelope with two `encrypted_body`): one
	// reader would take the first, another the last. No provider sends
	// such a body (the module answers 400).
	ErrAmbiguous = &Error{Reason: "ambiguous delivery: a JSON member the signature depends on appears more than once"}
)

// Opener is a Verifier of deliveries whose content is sealed (Stone's
// JWE): Open verifies the request as Verify does and returns the
// authenticated content, which is not the raw body.
type Opener interface {
	Verifier

	// Open returns the authenticated content of the request, or one of
	// the errors Verify returns. The content does not alias body.
	Open(r *http.Request, body []byte) ([]byte, error)
}

// DefaultTolerance is how far a signed timestamp may be from the current
// time when a constructor is given a tolerance of zero.
const DefaultTolerance = 5 * time.Minute

// PublicURL appends to dst the URL the provider signed for r: the URL the
// provider was configured to deliver to, with the query string of the
// request. Behind a proxy that URL is not what r says (its scheme and host
// are the proxy's), so the caller, which knows how it is deployed, supplies
// this function to the schemes that sign a URL (NewTwilio, NewSquare,
// NewHubSpot). It
// must not modify r, and is called on every request.
type PublicURL func(dst []byte, r *http.Request) []byte

// Encoding is how a signature is written in a header.
type Encoding uint8

const (
	// Hex is hexadecimal, in either case.
	Hex Encoding = iota

	// Base64 is standard base64 with padding (RFC 4648, section 4).
	Base64
)

// toleranceOrDefault returns d, or DefaultTolerance when d is not positive.
func toleranceOrDefault(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultTolerance
	}
	return d
}
