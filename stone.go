package webhookidempotency

import (
	"bytes"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/caddyserver/caddy/v2"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The `stone` preset (docs/providers.md: Stone): its options, its
// provisioning, and what it changes on the request path (the key and body
// are the verified event).

// stoneOptions are the verify options only the stone scheme takes.
var stoneOptions = map[string]bool{"private_key": true, "jwks_url": true, "jwks_file": true, "decrypt": true}

// checkStoneOptions is the rule of the stone options, for the Caddyfile
// parser (as they are read; scheme "" while it is not known yet) and for
// Provision: only `stone` takes them, jwks_url and jwks_file exclude each
// other, and jwks_url is an http(s) URL.
func checkStoneOptions(scheme string, cfg VerifyConfig) error {
	if scheme != "" && scheme != "stone" && scheme != "off" {
		for _, name := range cfg.optionsSet() {
			if stoneOptions[name] {
				return fmt.Errorf("%s: only the stone scheme takes %s", scheme, name)
			}
		}
	}
	if cfg.JWKSURL != "" && cfg.JWKSFile != "" {
		return errors.New("jwks_url and jwks_file both give Stone's key set: use one")
	}
	if cfg.JWKSURL != "" {
		return checkHTTPURL("jwks_url", cfg.JWKSURL)
	}
	return nil
}

// provisionStone builds Stone's scheme: the partner's private key, and
// the shared key set of jwks_file or jwks_url (default: production).
func (h *Handler) provisionStone(ctx caddy.Context, cfg VerifyConfig) error {
	if len(cfg.Secrets) > 0 || cfg.Header != "" || cfg.Prefix != "" || cfg.Algorithm != "" || cfg.Encoding != "" || cfg.URL != "" || cfg.Tolerance != 0 {
		return errors.New("stone verification takes private_key, jwks_url or jwks_file and decrypt, no secret, header, prefix, algorithm, encoding, url or tolerance")
	}
	if cfg.PrivateKey == "" {
		return errors.New("stone verification needs private_key: the PEM of the partner application's RSA private key (or `verify off`)")
	}
	repl := caddy.NewReplacer()
	pemText, err := repl.ReplaceOrErr(cfg.PrivateKey, true, true)
	if err != nil {
		return fmt.Errorf("resolving private_key: %v", err)
	}
	key, err := parseRSAPrivateKey(pemText)
	if err != nil {
		return fmt.Errorf("invalid private_key: %v", err)
	}
	url, file := signature.StoneProductionKeys, ""
	if cfg.JWKSFile != "" {
		if file, err = repl.ReplaceOrErr(cfg.JWKSFile, true, true); err != nil {
			return fmt.Errorf("resolving jwks_file: %v", err)
		}
	} else if cfg.JWKSURL != "" {
		if url, err = repl.ReplaceOrErr(cfg.JWKSURL, true, true); err != nil {
			return fmt.Errorf("resolving jwks_url: %v", err)
		}
		if err := checkHTTPURL("jwks_url", url); err != nil {
			return err
		}
	}
	keys, err := loadStoneKeys(ctx.Logger(), url, file)
	if err != nil {
		return err
	}
	v, err := signature.NewStone(key, keys)
	if err != nil {
		keys.release()
		return fmt.Errorf("stone verification: %v", err)
	}
	h.stoneKeys = keys
	h.verifier, h.opener, h.decrypt = v, v, cfg.Decrypt
	return nil
}

// releaseStoneKeys gives back the key set this handler holds.
func (h *Handler) releaseStoneKeys() {
	if h.stoneKeys != nil {
		h.stoneKeys.release()
		h.stoneKeys = nil
	}
}

// parseRSAPrivateKey parses the first PEM block, PKCS #1 or PKCS #8, as an
// RSA private key of at least 2048 bits. Errors never quote the key.
func parseRSAPrivateKey(text string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(text))
	if block == nil {
		return nil, errors.New("no PEM block (want a PRIVATE KEY or RSA PRIVATE KEY block)")
	}
	var key any
	var err error
	switch block.Type {
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block %q is not a private key", block.Type)
	}
	if err != nil {
		return nil, errors.New("the PEM block does not parse as a private key")
	}
	rk, ok := key.(*rsa.PrivateKey)
	if !ok {
		return nil, errors.New("not an RSA key")
	}
	if rk.N.BitLen() < 2048 {
		return nil, fmt.Errorf("an RSA key of %d bits; at least 2048 are needed", rk.N.BitLen())
	}
	return rk, nil
}

// open verifies a sealed delivery and keeps its content: the key and the
// body hash are taken from the event, not from an envelope that is
// encrypted anew for each attempt.
func (rs *requestState) open() error {
	event, err := rs.h.opener.Open(rs.r, rs.body.buf)
	if err != nil {
		return err
	}
	rs.event = event
	if rs.h.decrypt {
		rs.r.Header.Set("Content-Type", "application/json")
		rs.r.Header.Set("Content-Length", strconv.Itoa(len(event)))
	}
	return nil
}

// content is what the key and body hash are taken from: the verified
// event of a sealed delivery, else the raw body.
func (rs *requestState) content() []byte {
	if rs.event != nil {
		return rs.event
	}
	return rs.body.buf
}

// forwarded is the body the next handler (or the inbox) gets: the event
// with `decrypt`, else the raw body.
func (rs *requestState) forwarded() []byte {
	if rs.h.decrypt && rs.event != nil {
		return rs.event
	}
	return rs.body.buf
}

// handOnEvent gives the next handler the verified event as the body, when
// `decrypt` asks for it, and reports whether it did.
func (rs *requestState) handOnEvent() bool {
	if !rs.h.decrypt || rs.event == nil {
		return false
	}
	event := rs.event
	rs.r.Body = io.NopCloser(bytes.NewReader(event))
	rs.r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(event)), nil }
	rs.r.ContentLength = int64(len(event))
	rs.r.TransferEncoding = nil
	return true
}

// stoneUnavailable answers a delivery that cannot be verified yet: 503
// with Retry-After, so the sender retries once the key set is loaded.
func (rs *requestState) stoneUnavailable() error {
	rs.setResult(resultUnavailable)
	return writeError(rs.w, http.StatusServiceUnavailable, signature.ErrUnavailable.Reason, stoneKeysRetryAfter())
}
