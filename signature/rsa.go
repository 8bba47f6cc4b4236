package signature

import (
	"crypto"
	"crypto/rsa"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"net/http"
	"sync"
)

// RSAPadding is the padding of an RSA signature.
type RSAPadding uint8

const (
	// PKCS1v15 is RSASSA-PKCS1-v1_5 (RFC 8017, section 8.2).
	PKCS1v15 RSAPadding = iota

	// PSS is RSASSA-PSS (RFC 8017, section 8.1), with the salt length
	// read from the signature and the hash also used for MGF1.
	PSS
)

// maxRSABytes is the largest RSA signature decoded: 8192-bit keys.
const maxRSABytes = 1024

// NewRSA returns the generic RSA scheme: an RSA signature of the hash h
// (SHA-256 or SHA-512) of the raw body with the given padding, written in
// the named header with encoding enc, after prefix when prefix is not
// empty (a value without the prefix is then rejected). When the header is
// repeated, each value is a candidate (at most 4). A signature made with
// any of keys is accepted.
func NewRSA(header, prefix string, h crypto.Hash, padding RSAPadding, enc Encoding, keys []*rsa.PublicKey) (Verifier, error) {
	sh, err := newSignedHeader(header, prefix, enc)
	if err != nil {
		return nil, err
	}
	if h != crypto.SHA256 && h != crypto.SHA512 {
		return nil, fmt.Errorf("hash %v: want SHA-256 or SHA-512", h)
	}
	if padding != PKCS1v15 && padding != PSS {
		return nil, errors.New("unknown padding")
	}
	if len(keys) == 0 {
		return nil, errors.New("no public key")
	}
	for _, k := range keys {
		if k == nil || k.N == nil || k.Size() > maxRSABytes || k.N.BitLen() < minRSABits {
			return nil, fmt.Errorf("RSA public keys must have %d to %d bits", minRSABits, 8*maxRSABytes)
		}
	}
	v := &rsaVerifier{signedHeader: sh, hash: h, padding: padding, keys: keys}
	v.hashes.New = func() any { return h.New() }
	return v, nil
}

// rsaVerifier is the scheme of NewRSA.
type rsaVerifier struct {
	signedHeader
	hash    crypto.Hash
	padding RSAPadding
	keys    []*rsa.PublicKey
	hashes  sync.Pool // of hash.Hash
}

// Verify implements Verifier.
func (v *rsaVerifier) Verify(r *http.Request, body []byte) error {
	values, err := headerValues(r.Header, v.header)
	if err != nil {
		return err
	}
	var digest [sha512.Size]byte
	sum := v.digest(digest[:0], body)
	// base64 may decode to up to two bytes more before padding is seen
	var buf [maxRSABytes + 2]byte
	valid := false
	eachSignature(values, v.prefix, maxAsymmetric, func(val string) bool {
		sig, ok := decodeRSASignature(buf[:], v.encoding, val)
		for i := 0; ok && i < len(v.keys) && !valid; i++ {
			valid = len(sig) == v.keys[i].Size() && v.verifyOne(v.keys[i], sum, sig)
		}
		return !valid
	})
	if !valid {
		return ErrInvalid
	}
	return nil
}

// digest appends the hash of body to dst, with a pooled hash state.
func (v *rsaVerifier) digest(dst, body []byte) []byte {
	h := v.hashes.Get().(hash.Hash)
	h.Reset()
	h.Write(body)
	dst = h.Sum(dst)
	v.hashes.Put(h)
	return dst
}

func (v *rsaVerifier) verifyOne(k *rsa.PublicKey, sum, sig []byte) bool {
	if v.padding == PSS {
		return rsa.VerifyPSS(k, v.hash, sum, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto, Hash: v.hash}) == nil
	}
	return rsa.VerifyPKCS1v15(k, v.hash, sum, sig) == nil
}

// decodeRSASignature decodes an RSA signature into buf; it reports false
// when the value does not decode or is longer than buf.
func decodeRSASignature(buf []byte, enc Encoding, v string) ([]byte, bool) {
	// copying into an array on the stack decodes without allocating
	var src [2 * maxRSABytes]byte
	if len(v) > len(src) {
		return nil, false
	}
	in := src[:copy(src[:], v)]
	var n int
	var err error
	switch enc {
	case Hex:
		if len(in)%2 != 0 || len(in)/2 > len(buf) {
			return nil, false
		}
		n, err = hex.Decode(buf, in)
	default:
		if base64.StdEncoding.DecodedLen(len(in)) > len(buf) {
			return nil, false
		}
		n, err = base64.StdEncoding.Decode(buf, in)
	}
	if err != nil || n == 0 {
		return nil, false
	}
	return buf[:n], true
}

// WooviPublicKey is the RSA public key with which Woovi (OpenPix) signs
// the `x-webhook-signature` of its production webhooks, as Woovi publishes
// it: on "Validando Webhook payload usando x-webhook-signature" and at
// `GET https://api.woovi.com/api/v1/webhook/public-keys`, whose
// `key_identifier` (the SHA-256 of the key's DER) is
// 9dce618794f8986c603915a51b7029126c260e5cfdb2aa47e131d837fd62311c. It is
// the same for every Woovi customer. The sandbox signs with another key.
const WooviPublicKey = `-----BEGIN PUBLIC KEY-----
MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC/+NtIkjzevvqD+I3MMv3bLXDt
pvxBjY4BsRrSdca3rtAwMcRYYvxSnd7jagVLpctMiOxQO8ieUCKLSWHpsMAjO/zZ
WMKbqoG8MNpi/u3fp6zz0mcHCOSqYsPUUG19buW8bis5ZZ2IZgBObWSpTvJ0cnj6
HKBAA82Jln+lGwS1MwIDAQAB
-----END PUBLIC KEY-----
`

// wooviKey is WooviPublicKey, parsed once.
var wooviKey = sync.OnceValues(func() (*rsa.PublicKey, error) { return ParseRSAPublicKey(WooviPublicKey) })

// NewWoovi returns Woovi's (OpenPix's) scheme: `x-webhook-signature`, the
// base64 of an RSA PKCS #1 v1.5 signature of the SHA-256 of the body
// (`sha256WithRSAEncryption`), made with Woovi's private key. keys are the
// public keys to accept; with none, WooviPublicKey. It follows Woovi's
// "Validando Webhook payload usando x-webhook-signature" and the
// verification in Woovi's SDKs.
func NewWoovi(keys []*rsa.PublicKey) (Verifier, error) {
	if len(keys) == 0 {
		k, err := wooviKey()
		if err != nil {
			return nil, err
		}
		keys = []*rsa.PublicKey{k}
	}
	return NewRSA("X-Webhook-Signature", "", crypto.SHA256, PKCS1v15, Base64, keys)
}

var _ Verifier = (*rsaVerifier)(nil)
