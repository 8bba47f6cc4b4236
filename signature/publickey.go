package signature

import (
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"
)

// Public keys are written in many ways: providers publish PEM files,
// Discord shows a hex string, Standard Webhooks prefixes base64 with
// `whpk_`, Woovi publishes the base64 of a PEM. The parsers below accept
// each of these, so a key can be pasted as the provider gives it.

// minRSABits is the smallest RSA modulus accepted.
const minRSABits = 1024

// ParseEd25519PublicKey parses an Ed25519 public key written as a PEM
// block (`PUBLIC KEY`, PKIX), as `whpk_` followed by the base64 of the 32
// key bytes (Standard Webhooks), or as the 32 key bytes (or their PKIX DER)
// in hex or base64. Whitespace is ignored.
func ParseEd25519PublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, "whpk_"); ok {
		raw, err := base64.StdEncoding.DecodeString(stripSpace(rest))
		if err != nil || len(raw) != ed25519.PublicKeySize {
			return nil, errors.New("not a Standard Webhooks public key (whpk_ followed by the base64 of 32 bytes)")
		}
		return ed25519.PublicKey(raw), nil
	}
	if strings.HasPrefix(s, "whsk_") {
		return nil, errors.New("this is a Standard Webhooks secret key (whsk_): give its public key (whpk_) instead")
	}
	der, err := keyBytes(s)
	if err != nil {
		return nil, fmt.Errorf("not an Ed25519 public key: %v", err)
	}
	if len(der) == ed25519.PublicKeySize {
		return ed25519.PublicKey(der), nil
	}
	pub, err := x509.ParsePKIXPublicKey(der)
	if err != nil {
		return nil, errors.New("not an Ed25519 public key: want 32 bytes or a PKIX public key")
	}
	key, ok := pub.(ed25519.PublicKey)
	if !ok {
		return nil, fmt.Errorf("not an Ed25519 public key: the PKIX key is %s", keyType(pub))
	}
	return key, nil
}

// ParseRSAPublicKey parses an RSA public key of at least 1024 bits written
// as a PEM block (`PUBLIC KEY`, `RSA PUBLIC KEY` or `CERTIFICATE`), as the
// base64 of such a PEM block (as Woovi publishes its key), or as the DER of
// the key (PKIX or PKCS #1) in base64 or hex. Whitespace is ignored.
func ParseRSAPublicKey(s string) (*rsa.PublicKey, error) {
	s = strings.TrimSpace(s)
	der, isPEM, err := pemOrBytes(s)
	if err != nil {
		return nil, fmt.Errorf("not an RSA public key: %v", err)
	}
	var pub any
	switch {
	case isPEM == "CERTIFICATE":
		cert, cerr := x509.ParseCertificate(der)
		if cerr != nil {
			return nil, errors.New("not an RSA public key: the certificate does not parse")
		}
		pub = cert.PublicKey
	default:
		if pub, err = x509.ParsePKIXPublicKey(der); err != nil {
			if pub, err = x509.ParsePKCS1PublicKey(der); err != nil {
				return nil, errors.New("not an RSA public key: want a PKIX or PKCS #1 public key")
			}
		}
	}
	key, ok := pub.(*rsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("not an RSA public key: the key is %s", keyType(pub))
	}
	if key.E < 3 || key.E%2 == 0 {
		return nil, fmt.Errorf("RSA public key has an invalid exponent %d", key.E)
	}
	if key.N.BitLen() < minRSABits {
		return nil, fmt.Errorf("RSA public key of %d bits is too short (want at least %d)", key.N.BitLen(), minRSABits)
	}
	return key, nil
}

// keyBytes returns the DER of a PEM block, or the bytes of a hex or base64
// string.
func keyBytes(s string) ([]byte, error) {
	der, _, err := pemOrBytes(s)
	return der, err
}

// pemOrBytes decodes a PEM block (also when the whole PEM is base64
// encoded), else hex, else base64 (standard or URL alphabet, padded or
// not). It returns the PEM block's type, "" when there was none.
func pemOrBytes(s string) (der []byte, pemType string, err error) {
	if strings.Contains(s, "-----BEGIN") {
		block, _ := pem.Decode([]byte(s))
		if block == nil {
			return nil, "", errors.New("the PEM block does not decode")
		}
		return block.Bytes, block.Type, nil
	}
	compact := stripSpace(s)
	if compact == "" {
		return nil, "", errors.New("empty key")
	}
	if b, herr := hex.DecodeString(compact); herr == nil {
		return b, "", nil
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		b, berr := enc.DecodeString(compact)
		if berr != nil {
			continue
		}
		if strings.Contains(string(b), "-----BEGIN") {
			return pemOrBytes(string(b))
		}
		return b, "", nil
	}
	return nil, "", errors.New("want PEM, base64 or hex")
}

// stripSpace removes every white-space character, so that keys wrapped
// over lines decode.
func stripSpace(s string) string {
	return strings.Map(func(r rune) rune {
		switch r {
		case ' ', '\t', '\n', '\r':
			return -1
		}
		return r
	}, s)
}

// keyType names the type of a parsed public key for error messages.
func keyType(pub any) string {
	switch pub.(type) {
	case *rsa.PublicKey:
		return "an RSA key"
	case ed25519.PublicKey:
		return "an Ed25519 key"
	}
	return fmt.Sprintf("a %T", pub)
}
