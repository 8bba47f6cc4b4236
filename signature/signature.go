// Package signature verifies the signatures webhook providers put on their
// deliveries: Stripe, Paddle, Slack, Standard Webhooks (and Svix) with
// secrets or public keys, Mercado Pago, PagBank, Twilio, Square, Shopify,
// GitLab, Twitch, Zoom, Linear, HubSpot, Discord, Woovi, Stone and Hook0
// (Coinbase's CDP webhooks), JSON Web Tokens (Evolution API), and the
// generic schemes that sign the raw body with an HMAC (GitHub, Meta,
// iFood, Razorpay, …), an Ed25519 or an RSA key, or send a shared token.
//
// For providers without a scheme of their own there are building blocks
// (the package's tests write Amazon SNS, PayPal, SendGrid, Adyen and
// Google Pub/Sub with them): NewTemplate signs a string made of the request (see Templates)
// with an HMAC, Ed25519, ECDSA P-256 or RSA, the key a secret, a public key
// or a certificate the delivery names and that is fetched only from the
// hosts allowed (CertURLConfig), optionally each item of a batch on its
// own; NewJWTVerifier checks a JSON Web Token against secrets or a JWK set
// fetched and refreshed in the background (KeySet), with its issuer,
// audience and claims. NewTemplateSigner and NewJWTKeySigner sign as they
// check.
//
// A Verifier checks one request against its raw body, before the body is
// parsed. Verifiers are safe for concurrent use, compare in constant time,
// accept a signature made with any of their secrets or public keys
// (rotation), and allocate nothing per request, except Twilio's (which
// parses the form body), Mercado Pago's (which reads the body's JSON), the
// RSA and ECDSA schemes (whose arithmetic allocates), the JWT schemes,
// Stone's (JWE and JWS), and a template's query fields. Every failure is
// one of ErrMissing, ErrInvalid, ErrTimestamp, ErrUnavailable and
// ErrAmbiguous, whose Reason can be shown to the sender; no error ever
// contains a secret. Public keys are parsed with ParseEd25519PublicKey,
// ParseECDSAPublicKey and ParseRSAPublicKey.
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
//
// # Templates
//
// The string a template scheme signs (TemplateConfig.String) is written
// in a small language:
//
//   - Text is signed as written. A backslash starts an escape: \n (line
//     feed), \r, \t, \\, and \{ \} \[ \] for those characters; any
//     other escape is an error. The Caddyfile keeps a token's backslashes
//     as they are, so "a\nb" there is a, a line feed and b here.
//   - A field in braces is replaced by its value: {body} the raw body;
//     {method} the request method; {url} the public URL (the URL the
//     provider was told to deliver to, with the request's query, from
//     TemplateConfig.PublicURL); {header.<Name>} the first value of a
//     header; {query.<name>} the first value of a query parameter,
//     percent-decoded; {json.<path>} a member of the JSON body, a string
//     decoded and any other value as written; {body.crc32} the CRC-32
//     (IEEE) of the body in decimal, as PayPal signs it; {body.sha256} the
//     SHA-256 of the body in lower-case hex; {timestamp} the timestamp as
//     sent (TemplateConfig.Timestamp, which it needs), once taken out of
//     the value that holds it. A JSON path is member names
//     separated by dots, a backslash making the next character literal;
//     a segment of digits also indexes an array.
//   - A part in square brackets is optional: it is left out, text and all,
//     when a field in it is absent (a header or a query parameter not
//     sent, a JSON member absent or null). Amazon SNS signs
//     "Subject\n<subject>\n" only for a message that has a subject:
//     Message\n{json.Message}\nMessageId\n{json.MessageId}\n[Subject\n{json.Subject}\n]…
//     Brackets do not nest, and must hold a field. Outside brackets an
//     absent field is the empty string, as Adyen signs an absent
//     originalReference: nothing between its colons.
//
// A header may hold more than one signature, and more than signatures.
// SignatureLocation's Separator splits its value into items, of which
// those with the Prefix are signatures (any may match) and the first Skip
// are not; TimestampLocation's Separator and Prefix take the timestamp out
// of such a value. So Stripe-like `t=<ts>,v1=<sig>[,v1=<sig>]` headers
// (Calendly, WorkOS, Mux) are a signature with Separator "," and Prefix
// "v1=" and a timestamp in the same header with Separator "," and Prefix
// "t=", signed as "{timestamp}.{body}" (Paddle's `ts=…;h1=…` is the same
// with Separator ";"); Recurly's `<ts>,<sig>[,<sig>]` is Skip 1 and a
// timestamp without a prefix (the first item); Persona's rotation, two
// sets `t=…,v1=… t=…,v1=…` each with its own timestamp, adds Sets " ": each
// set is verified on its own. Secrets may be decoded before use
// (TemplateConfig.SecretEncoding: hex, base64, Standard Webhooks' whsec_,
// Unicode NFKD, WordPress's HTML references), or tried under several
// encodings at once.
//
// A template whose algorithm is Token has no string: the value where its
// signature is must be one of the secrets, as written (a shared token in
// a header, the query, or each item of a batch, as Microsoft Graph puts
// its clientState in each change notification).
//
// JSON lets an object give a member twice, and readers disagree on which
// counts (Go's encoding/json, JavaScript, PHP and Python take the last;
// Go also matches names in any case), so a signed value could stand beside
// an unsigned one the application reads: a member a template reads that
// is given twice, or in another case, on any object of its path, makes
// the delivery ErrAmbiguous.
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
	// it needs are not loaded yet (a key set, Stone's included, while it
	// cannot be fetched; a certificate whose fetch failed). It is no
	// verdict on the request, which the sender should retry later (the
	// module answers 503 with Retry-After).
	ErrUnavailable = &Error{Reason: "verification keys unavailable"}

	// ErrAmbiguous means the body gives a JSON member the scheme reads
	// more than once (Stone's envelope with two `encrypted_body`, a
	// template's field given twice or in another case): one reader would
	// take the first, another the last. No provider sends such a body
	// (the module answers 400).
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
