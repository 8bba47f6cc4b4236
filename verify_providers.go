package webhookidempotency

import (
	"crypto/sha1"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/tidwall/gjson"
)

// maxHeaderItems caps how many comma- or semicolon-separated items of a
// signature header are looked at.
const maxHeaderItems = 2 * maxSignatures

// TimestampedHMACVerifier is a scheme that sends a timestamp and a list of
// HMAC-SHA256 hex signatures of `{ts}{sep}{body}` in one header, any of
// which may match:
//   - `stripe`: `Stripe-Signature: t=…,v1=…[,v1=…]`, `{t}.{body}`, keyed
//     with the endpoint secret as written (`whsec_…` is not decoded);
//   - `paddle`: `Paddle-Signature: ts=…;h1=…[;h1=…]`, `{ts}:{body}` (Paddle
//     sends one `h1` per active secret while a secret is being rotated).
type TimestampedHMACVerifier struct {
	header    string
	sep       byte
	parse     func(string) (ts string, sigs sigSet, err error)
	keys      keyring
	tolerance time.Duration
}

func newStripeVerifier(cfg VerifyConfig) (Verifier, error) {
	return newTimestampedHMACVerifier(cfg, "Stripe-Signature", '.', parseStripeSignature), nil
}

func newPaddleVerifier(cfg VerifyConfig) (Verifier, error) {
	return newTimestampedHMACVerifier(cfg, "Paddle-Signature", ':', parsePaddleSignature), nil
}

func newTimestampedHMACVerifier(cfg VerifyConfig, header string, sep byte, parse func(string) (string, sigSet, error)) *TimestampedHMACVerifier {
	return &TimestampedHMACVerifier{
		header:    header,
		sep:       sep,
		parse:     parse,
		keys:      newHMACKeyring(sha256.New, rawSecrets(cfg.Secrets)),
		tolerance: time.Duration(cfg.Tolerance),
	}
}

// Verify implements Verifier.
func (v *TimestampedHMACVerifier) Verify(r *http.Request, body []byte) error {
	ts, sigs, err := v.parse(headerValue(r.Header, v.header))
	if err != nil {
		return err
	}
	if err := checkTimestamp(ts, v.tolerance, false); err != nil {
		return err
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(*msg, ts...), v.sep)
	if !v.keys.match(*msg, body, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// parseStripeSignature parses `t=…,v1=…[,v1=…]`; other schemes (`v0`) are
// ignored.
func parseStripeSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ",", "t", "v1")
}

// SlackVerifier is the `slack` scheme: `X-Slack-Signature: v0=<hex>`, an
// HMAC-SHA256 of `v0:{X-Slack-Request-Timestamp}:{body}`.
type SlackVerifier struct {
	keys      keyring
	tolerance time.Duration
}

func newSlackVerifier(cfg VerifyConfig) (Verifier, error) {
	return &SlackVerifier{
		keys:      newHMACKeyring(sha256.New, rawSecrets(cfg.Secrets)),
		tolerance: time.Duration(cfg.Tolerance),
	}, nil
}

// Verify implements Verifier.
func (v *SlackVerifier) Verify(r *http.Request, body []byte) error {
	sig, ts := headerValue(r.Header, "X-Slack-Signature"), headerValue(r.Header, "X-Slack-Request-Timestamp")
	if sig == "" || ts == "" {
		return errMissingSignature
	}
	if err := checkTimestamp(ts, v.tolerance, false); err != nil {
		return err
	}
	var sigs sigSet
	if hexSig, ok := strings.CutPrefix(sig, "v0="); ok {
		sigs.add(encHex, hexSig)
	}
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(append(*msg, "v0:"...), ts...), ':')
	if !v.keys.match(*msg, body, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// StandardWebhooksVerifier is the Standard Webhooks scheme (`standard`,
// `svix`, and `gitlab` signing tokens): `{prefix}signature: v1,<b64> …`,
// an HMAC-SHA256 of `{id}.{timestamp}.{body}` keyed with the base64 after
// `whsec_`.
type StandardWebhooksVerifier struct {
	idHeader, tsHeader, sigHeader string
	keys                          keyring
	tolerance                     time.Duration
}

// standardWebhooks builds the scheme for headers named with prefix.
func standardWebhooks(prefix string) func(VerifyConfig) (Verifier, error) {
	return func(cfg VerifyConfig) (Verifier, error) {
		return newStandardWebhooksVerifier(prefix, cfg.Secrets, time.Duration(cfg.Tolerance))
	}
}

func newStandardWebhooksVerifier(prefix string, secrets []string, tolerance time.Duration) (*StandardWebhooksVerifier, error) {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		k, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, "whsec_"))
		if err != nil || len(k) == 0 {
			return nil, fmt.Errorf("secret %d is not a Standard Webhooks secret (whsec_ followed by base64)", i+1)
		}
		keys[i] = k
	}
	return &StandardWebhooksVerifier{
		idHeader:  http.CanonicalHeaderKey(prefix + "id"),
		tsHeader:  http.CanonicalHeaderKey(prefix + "timestamp"),
		sigHeader: http.CanonicalHeaderKey(prefix + "signature"),
		keys:      newHMACKeyring(sha256.New, keys),
		tolerance: tolerance,
	}, nil
}

// Verify implements Verifier.
func (v *StandardWebhooksVerifier) Verify(r *http.Request, body []byte) error {
	id, ts, sig := headerValue(r.Header, v.idHeader), headerValue(r.Header, v.tsHeader), headerValue(r.Header, v.sigHeader)
	if id == "" || ts == "" || sig == "" {
		return errMissingSignature
	}
	if err := checkTimestamp(ts, v.tolerance, false); err != nil {
		return err
	}
	sigs := parseStandardSignatures(sig)
	msg := getScratch()
	defer putScratch(msg)
	*msg = append(append(append(append(*msg, id...), '.'), ts...), '.')
	if !v.keys.match(*msg, body, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// parseStandardSignatures parses a space-separated list of
// `<version>,<base64>`; only `v1` (symmetric) signatures are taken.
func parseStandardSignatures(h string) (sigs sigSet) {
	for i := 0; h != "" && i < maxHeaderItems; i++ {
		var item string
		item, h, _ = strings.Cut(h, " ")
		if sig, ok := strings.CutPrefix(item, "v1,"); ok {
			if !sigs.add(encBase64, sig) {
				break
			}
		}
	}
	return sigs
}

// MercadoPagoVerifier is the `mercadopago` scheme: `x-signature: ts=…,v1=…`,
// an HMAC-SHA256 hex of the manifest
// `id:{data.id};request-id:{x-request-id};ts:{ts};`, where data.id comes
// from the query string (lower-cased) and a part whose value is absent is
// left out, as Mercado Pago documents. The manifest does not cover the
// body, so when the body is JSON with a `data.id`, it must equal the
// signed one: a body cannot be swapped for another resource's.
type MercadoPagoVerifier struct {
	keys      keyring
	tolerance time.Duration
}

func newMercadoPagoVerifier(cfg VerifyConfig) (Verifier, error) {
	return &MercadoPagoVerifier{
		keys:      newHMACKeyring(sha256.New, rawSecrets(cfg.Secrets)),
		tolerance: time.Duration(cfg.Tolerance),
	}, nil
}

// Verify implements Verifier.
func (v *MercadoPagoVerifier) Verify(r *http.Request, body []byte) error {
	ts, sigs, err := parseMercadoPagoSignature(headerValue(r.Header, "X-Signature"))
	if err != nil {
		return err
	}
	// Mercado Pago has sent seconds and milliseconds
	if err := checkTimestamp(ts, v.tolerance, true); err != nil {
		return err
	}
	dataID := strings.ToLower(queryValue(r.URL.RawQuery, "data.id"))
	if bodyID := gjson.GetBytes(body, "data.id"); bodyID.Exists() && !strings.EqualFold(bodyID.String(), dataID) {
		return errInvalidSignature
	}
	msg := getScratch()
	defer putScratch(msg)
	if dataID != "" {
		*msg = append(append(append(*msg, "id:"...), dataID...), ';')
	}
	if reqID := headerValue(r.Header, "X-Request-Id"); reqID != "" {
		*msg = append(append(append(*msg, "request-id:"...), reqID...), ';')
	}
	*msg = append(append(append(*msg, "ts:"...), ts...), ';')
	if !v.keys.match(*msg, nil, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// parseMercadoPagoSignature parses `ts=…,v1=…`.
func parseMercadoPagoSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ",", "ts", "v1")
}

// PagBankVerifier is the `pagbank` scheme: `x-authenticity-token`, the
// SHA-256 hex of `{token}-{body}` (a plain digest, not an HMAC).
type PagBankVerifier struct {
	keys keyring
}

func newPagBankVerifier(cfg VerifyConfig) (Verifier, error) {
	return &PagBankVerifier{keys: newDigestKeyring(sha256.New, cfg.Secrets, "-")}, nil
}

// Verify implements Verifier.
func (v *PagBankVerifier) Verify(r *http.Request, body []byte) error {
	sig := strings.TrimSpace(headerValue(r.Header, "X-Authenticity-Token"))
	if sig == "" {
		return errMissingSignature
	}
	var sigs sigSet
	sigs.add(encHex, sig)
	if !v.keys.match(nil, body, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// parsePaddleSignature parses `ts=…;h1=…[;h1=…]`.
func parsePaddleSignature(h string) (ts string, sigs sigSet, err error) {
	return parseSignedList(h, ";", "ts", "h1")
}

// parseSignedList parses a header of sep-separated `key=value` items
// holding a timestamp (tsKey, the first one wins) and hex signatures
// (sigKey, any number up to the cap); other items are ignored. Spaces
// around items, keys and values are ignored.
func parseSignedList(h, sep, tsKey, sigKey string) (ts string, sigs sigSet, err error) {
	h = strings.TrimSpace(h)
	if h == "" {
		return "", sigs, errMissingSignature
	}
	for i := 0; h != "" && i < maxHeaderItems; i++ {
		var item string
		item, h, _ = strings.Cut(h, sep)
		k, val, _ := strings.Cut(item, "=")
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(k) {
		case tsKey:
			if ts == "" {
				ts = val
			}
		case sigKey:
			sigs.add(encHex, val)
		}
	}
	if ts == "" || sigs.seen == 0 {
		return "", sigs, errInvalidSignature
	}
	return ts, sigs, nil
}

// TwilioVerifier is the `twilio` scheme: `X-Twilio-Signature`, HMAC-SHA1
// base64 of the public URL followed by the form parameters sorted by name,
// each written as name then value. A JSON body is signed through the
// `bodySHA256` query parameter instead, which must be the SHA-256 hex of
// the body. Twilio signs the URL with or without the default port, so
// both are accepted.
type TwilioVerifier struct {
	keys keyring
	url  string
}

func newTwilioVerifier(cfg VerifyConfig) (Verifier, error) {
	return &TwilioVerifier{keys: newHMACKeyring(sha1.New, rawSecrets(cfg.Secrets)), url: cfg.URL}, nil
}

// Verify implements Verifier.
func (v *TwilioVerifier) Verify(r *http.Request, body []byte) error {
	sig := headerValue(r.Header, "X-Twilio-Signature")
	if sig == "" {
		return errMissingSignature
	}
	var sigs sigSet
	sigs.add(encBase64, strings.TrimSpace(sig))

	msg := getScratch()
	defer putScratch(msg)
	*msg = appendPublicURL(*msg, r, v.url)
	urlLen := len(*msg)

	if bodyHash := queryValue(queryOf(string((*msg)[:urlLen])), "bodySHA256"); bodyHash != "" {
		sum := sha256.Sum256(body)
		var hexSum [2 * sha256.Size]byte
		hex.Encode(hexSum[:], sum[:])
		if subtle.ConstantTimeCompare(hexSum[:], []byte(strings.ToLower(bodyHash))) != 1 {
			return errInvalidSignature
		}
	} else if len(body) > 0 {
		params, err := url.ParseQuery(string(body))
		if err != nil {
			return errInvalidSignature
		}
		names := make([]string, 0, len(params))
		for name := range params {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			values := params[name]
			if len(values) > 1 {
				sort.Strings(values)
			}
			for _, val := range values {
				*msg = append(append(*msg, name...), val...)
			}
		}
	}
	if v.keys.match(*msg, nil, &sigs) {
		return nil
	}
	// the same URL with the default port added, or removed
	other := getScratch()
	defer putScratch(other)
	*other = appendPortVariant(*other, string((*msg)[:urlLen]))
	if len(*other) == 0 {
		return errInvalidSignature
	}
	*other = append(*other, (*msg)[urlLen:]...)
	if !v.keys.match(*other, nil, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// SquareVerifier is the `square` scheme:
// `x-square-hmacsha256-signature`, HMAC-SHA256 base64 of the notification
// URL followed by the body.
type SquareVerifier struct {
	keys keyring
	url  string
}

func newSquareVerifier(cfg VerifyConfig) (Verifier, error) {
	return &SquareVerifier{keys: newHMACKeyring(sha256.New, rawSecrets(cfg.Secrets)), url: cfg.URL}, nil
}

// Verify implements Verifier.
func (v *SquareVerifier) Verify(r *http.Request, body []byte) error {
	sig := headerValue(r.Header, "X-Square-Hmacsha256-Signature")
	if sig == "" {
		return errMissingSignature
	}
	var sigs sigSet
	sigs.add(encBase64, strings.TrimSpace(sig))
	msg := getScratch()
	defer putScratch(msg)
	*msg = appendPublicURL(*msg, r, v.url)
	if !v.keys.match(*msg, body, &sigs) {
		return errInvalidSignature
	}
	return nil
}

// GitLabVerifier is the `gitlab` scheme: the secret token in
// `X-Gitlab-Token`, compared in constant time; secrets that start with
// `whsec_` are signing tokens instead, checked as Standard Webhooks on the
// `webhook-*` headers. With both kinds configured, either proof is
// accepted.
type GitLabVerifier struct {
	tokens   tokenSet
	standard *StandardWebhooksVerifier
}

func newGitLabVerifier(cfg VerifyConfig) (Verifier, error) {
	var tokens, signing []string
	for _, s := range cfg.Secrets {
		if strings.HasPrefix(s, "whsec_") {
			signing = append(signing, s)
		} else {
			tokens = append(tokens, s)
		}
	}
	v := &GitLabVerifier{tokens: newTokenSet(tokens)}
	if len(signing) > 0 {
		std, err := newStandardWebhooksVerifier("webhook-", signing, time.Duration(cfg.Tolerance))
		if err != nil {
			return nil, errors.New("a secret starting with whsec_ is not a valid signing token (whsec_ followed by base64)")
		}
		v.standard = std
	}
	return v, nil
}

// Verify implements Verifier.
func (v *GitLabVerifier) Verify(r *http.Request, body []byte) error {
	if v.standard != nil && headerValue(r.Header, "Webhook-Signature") != "" {
		return v.standard.Verify(r, body)
	}
	token := headerValue(r.Header, "X-Gitlab-Token")
	if token == "" || len(v.tokens) == 0 {
		return errMissingSignature
	}
	if !v.tokens.match(token) {
		return errInvalidSignature
	}
	return nil
}

// appendPublicURL appends the public URL of r: the configured one (with
// the request's query string when it has none), else the URL rebuilt from
// the request. X-Forwarded-Proto and X-Forwarded-Host are honoured only
// when the server marked the request as coming from a trusted proxy
// (`trusted_proxies`); otherwise any client could choose the URL that is
// checked.
func appendPublicURL(dst []byte, r *http.Request, configured string) []byte {
	uri := requestURI(r)
	if configured != "" {
		dst = append(dst, configured...)
		if !strings.Contains(configured, "?") {
			if _, query, ok := strings.Cut(uri, "?"); ok {
				dst = append(append(dst, '?'), query...)
			}
		}
		return dst
	}
	scheme, host := "http", r.Host
	if r.TLS != nil {
		scheme = "https"
	}
	if trusted, _ := caddyhttp.GetVar(r.Context(), caddyhttp.TrustedProxyVarKey).(bool); trusted {
		if p := firstListItem(headerValue(r.Header, "X-Forwarded-Proto")); p == "http" || p == "https" {
			scheme = p
		}
		if h := firstListItem(headerValue(r.Header, "X-Forwarded-Host")); h != "" {
			host = h
		}
	}
	dst = append(append(append(dst, scheme...), "://"...), host...)
	return append(dst, uri...)
}

// requestURI is the path and query the client asked for, before any
// rewrite.
func requestURI(r *http.Request) string {
	if orig, ok := r.Context().Value(caddyhttp.OriginalRequestCtxKey).(http.Request); ok && orig.RequestURI != "" {
		return originForm(orig.RequestURI)
	}
	if r.RequestURI != "" {
		return originForm(r.RequestURI)
	}
	return r.URL.RequestURI()
}

// originForm returns the path and query of a request target, which a
// client may send in absolute form (`http://host/path?query`).
func originForm(uri string) string {
	if strings.HasPrefix(uri, "/") {
		return uri
	}
	if u, err := url.ParseRequestURI(uri); err == nil {
		return u.RequestURI()
	}
	return uri
}

// firstListItem is the first element of a comma-separated header value.
func firstListItem(v string) string {
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(first)
}

// queryOf returns the raw query of an absolute URL.
func queryOf(u string) string {
	_, q, _ := strings.Cut(u, "?")
	q, _, _ = strings.Cut(q, "#")
	return q
}

// appendPortVariant appends u with the default port of its scheme added
// when it has none, or with its port removed when it has one; it appends
// nothing when u cannot be split.
func appendPortVariant(dst []byte, u string) []byte {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return dst
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	host, tail := rest[:end], rest[end:]
	dst = append(append(dst, scheme...), "://"...)
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		dst = append(dst, host[:i]...)
	} else {
		port := ":80"
		if scheme == "https" {
			port = ":443"
		}
		dst = append(append(dst, host...), port...)
	}
	return append(dst, tail...)
}

// Interface guards
var (
	_ Verifier = (*TimestampedHMACVerifier)(nil)
	_ Verifier = (*SlackVerifier)(nil)
	_ Verifier = (*StandardWebhooksVerifier)(nil)
	_ Verifier = (*MercadoPagoVerifier)(nil)
	_ Verifier = (*PagBankVerifier)(nil)
	_ Verifier = (*TwilioVerifier)(nil)
	_ Verifier = (*SquareVerifier)(nil)
	_ Verifier = (*GitLabVerifier)(nil)
)
