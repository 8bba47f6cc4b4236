package webhookidempotency

import (
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
)

// VerifyConfig configures signature verification (SPEC §3.3, §5).
type VerifyConfig struct {
	// The verification scheme: a provider preset name (`stripe`,
	// `github`, …), `hmac` or `token` for the generic schemes, or `off`.
	// Default: the handler's provider, if any; else no verification.
	Scheme string `json:"scheme,omitempty"`

	// Secrets to verify with. A signature valid under any of them is
	// accepted (rotation). Placeholders such as `{env.X}` and
	// `{file./run/secrets/x}` are resolved at provision time.
	Secrets []string `json:"secrets,omitempty"`

	// The header that carries the signature or token. Default: the
	// scheme's own header; required for `hmac` and `token`.
	Header string `json:"header,omitempty"`

	// The HMAC hash for `hmac`: `sha1`, `sha256` or `sha512`.
	// Default: `sha256`.
	Algorithm string `json:"algorithm,omitempty"`

	// How the `hmac` signature is written: `hex` or `base64`.
	// Default: `hex`.
	Encoding string `json:"encoding,omitempty"`

	// A prefix in front of the `hmac` signature, such as `sha256=`.
	// Default: none.
	Prefix string `json:"prefix,omitempty"`

	// How far a signed timestamp may be from the current time, for the
	// schemes that sign one. Default: 5m.
	Tolerance caddy.Duration `json:"tolerance,omitempty"`

	// The public URL the provider signs, for schemes that sign the URL
	// (`twilio`, `square`). Default: reconstructed from the request.
	URL string `json:"url,omitempty"`
}

// Verifier checks the signature of a request on its raw body. It must not
// modify the request or the body, and must compare in constant time.
type Verifier interface {
	// Verify returns nil when the request is authentic, or a
	// *VerificationError saying why not.
	Verify(r *http.Request, body []byte) error
}

// VerificationError is a failed verification; Reason goes to the client.
type VerificationError struct {
	// Reason is a short phrase safe to show the sender.
	Reason string
}

func (e *VerificationError) Error() string { return e.Reason }

// The reasons of SPEC §3.3.
var (
	errMissingSignature = &VerificationError{Reason: "missing signature"}
	errInvalidSignature = &VerificationError{Reason: "invalid signature"}
	errStaleTimestamp   = &VerificationError{Reason: "timestamp outside tolerance"}
)

// defaultTolerance is the default timestamp tolerance.
const defaultTolerance = 5 * time.Minute

// verifySchemes lists the generic schemes besides the provider presets.
var verifySchemes = map[string]bool{"hmac": true, "token": true, "off": true}

// knownScheme reports whether name is a verification scheme.
func knownScheme(name string) bool {
	_, isProvider := providers[name]
	return isProvider || verifySchemes[name]
}

// newVerifier builds the verifier of a scheme; cfg has its secrets resolved
// and its tolerance defaulted.
func newVerifier(cfg VerifyConfig) (Verifier, error) {
	return nil, fmt.Errorf("scheme %q is not available in this build", cfg.Scheme)
}
