package signature

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
)

// ParseEd25519PrivateKey parses an Ed25519 private key written as a PEM
// block (`PRIVATE KEY`, PKCS #8), as its 32-byte seed or 64-byte key in
// hex or base64 (`whsk_` and base64, as Standard Webhooks writes its
// secret keys, included), or as the PKCS #8 DER of the key in hex or
// base64. Whitespace is ignored.
func ParseEd25519PrivateKey(s string) (ed25519.PrivateKey, error) {
	der, _, err := pemOrBytes(strings.TrimPrefix(strings.TrimSpace(s), "whsk_"))
	if err != nil {
		return nil, errors.New("not an Ed25519 private key: want a PEM block, or the seed or the key in hex or base64")
	}
	switch len(der) {
	case ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(der), nil
	case ed25519.PrivateKeySize:
		return ed25519.PrivateKey(der), nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, errors.New("not an Ed25519 private key: want a PEM block, or the seed or the key in hex or base64")
	}
	ek, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an Ed25519 private key", k)
	}
	return ek, nil
}

// ParseRSAPrivateKey parses an RSA private key of at least 1024 bits
// written as a PEM block (`PRIVATE KEY`, PKCS #8, or `RSA PRIVATE KEY`,
// PKCS #1), or as its DER in hex or base64. Whitespace outside a PEM
// block is ignored.
func ParseRSAPrivateKey(s string) (*rsa.PrivateKey, error) {
	der, _, err := pemOrBytes(s)
	if err != nil {
		return nil, errors.New("not an RSA private key: want a PEM block (PKCS #1 or #8)")
	}
	var key *rsa.PrivateKey
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		key = k
	} else if k8, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		rk, ok := k8.(*rsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("a %T, not an RSA private key", k8)
		}
		key = rk
	} else {
		return nil, errors.New("not an RSA private key: want a PEM block (PKCS #1 or #8)")
	}
	if key.N.BitLen() < minRSABits {
		return nil, fmt.Errorf("the RSA key has %d bits, fewer than %d", key.N.BitLen(), minRSABits)
	}
	return key, nil
}

// ParseECDSAPrivateKey parses an ECDSA private key on P-256 written as a
// PEM block (`EC PRIVATE KEY`, SEC 1, or `PRIVATE KEY`, PKCS #8), or as
// its DER in hex or base64. Whitespace outside a PEM block is ignored.
func ParseECDSAPrivateKey(s string) (*ecdsa.PrivateKey, error) {
	der, _, err := pemOrBytes(s)
	if err != nil {
		return nil, errors.New("not an ECDSA private key: want a PEM block (SEC 1 or PKCS #8)")
	}
	var key *ecdsa.PrivateKey
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		key = k
	} else if k8, err := x509.ParsePKCS8PrivateKey(der); err == nil {
		ek, ok := k8.(*ecdsa.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("a %T, not an ECDSA private key", k8)
		}
		key = ek
	} else {
		return nil, errors.New("not an ECDSA private key: want a PEM block (SEC 1 or PKCS #8)")
	}
	if key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("the ECDSA key is on %s, not P-256", key.Curve.Params().Name)
	}
	return key, nil
}
