package signature

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/x509"
	"errors"
	"fmt"
	"hash"
	"sort"
	"strings"
	"sync"
)

// The algorithms of NewTemplate, by the names its configuration uses.
const (
	HMACSHA1        = "hmac-sha1"
	HMACSHA256      = "hmac-sha256"
	HMACSHA512      = "hmac-sha512"
	Ed25519         = "ed25519"
	ECDSAP256SHA256 = "ecdsa-p256-sha256"
	RSASHA1         = "rsa-sha1"
	RSASHA256       = "rsa-sha256"
	RSAPSSSHA256    = "rsa-pss-sha256"

	// Token is no algorithm: the signature is one of the secrets itself,
	// sent as it is (a shared token, such as Microsoft Graph's
	// clientState), compared in constant time. A template of it has no
	// string and no timestamp.
	Token = "token"
)

// keyFamily is the kind of key an algorithm takes.
type keyFamily uint8

const (
	familyHMAC keyFamily = iota
	familyEd25519
	familyECDSA
	familyRSA
	familyToken
)

func (f keyFamily) String() string {
	switch f {
	case familyHMAC:
		return "HMAC"
	case familyEd25519:
		return "Ed25519"
	case familyECDSA:
		return "ECDSA P-256"
	case familyToken:
		return "token"
	}
	return "RSA"
}

// algorithm is one of the algorithms above.
type algorithm struct {
	name   string
	family keyFamily
	hash   crypto.Hash // none for Ed25519
	pss    bool
}

// algorithms are the algorithms NewTemplate knows, by name.
var algorithms = map[string]*algorithm{
	HMACSHA1:        {name: HMACSHA1, family: familyHMAC, hash: crypto.SHA1},
	HMACSHA256:      {name: HMACSHA256, family: familyHMAC, hash: crypto.SHA256},
	HMACSHA512:      {name: HMACSHA512, family: familyHMAC, hash: crypto.SHA512},
	Ed25519:         {name: Ed25519, family: familyEd25519},
	ECDSAP256SHA256: {name: ECDSAP256SHA256, family: familyECDSA, hash: crypto.SHA256},
	RSASHA1:         {name: RSASHA1, family: familyRSA, hash: crypto.SHA1},
	RSASHA256:       {name: RSASHA256, family: familyRSA, hash: crypto.SHA256},
	RSAPSSSHA256:    {name: RSAPSSSHA256, family: familyRSA, hash: crypto.SHA256, pss: true},
	Token:           {name: Token, family: familyToken},
}

// lookupAlgorithm returns the algorithm of a name, or an error that lists
// the names there are.
func lookupAlgorithm(name string) (*algorithm, error) {
	if a, ok := algorithms[strings.ToLower(strings.TrimSpace(name))]; ok {
		return a, nil
	}
	names := make([]string, 0, len(algorithms))
	for n := range algorithms {
		names = append(names, n)
	}
	sort.Strings(names)
	return nil, fmt.Errorf("unknown algorithm %q (want one of %s)", name, strings.Join(names, ", "))
}

// newHash returns the constructor of a hash the algorithms use; each is
// linked in.
func newHash(h crypto.Hash) func() hash.Hash {
	switch h {
	case crypto.SHA1:
		return sha1.New
	case crypto.SHA512:
		return sha512.New
	}
	return sha256.New
}

// digests pools the hash states of the public-key algorithms, by hash.
var digests = map[crypto.Hash]*sync.Pool{
	crypto.SHA1:   {New: func() any { return sha1.New() }},
	crypto.SHA256: {New: func() any { return sha256.New() }},
	crypto.SHA512: {New: func() any { return sha512.New() }},
}

// checkPublicKey reports whether key is a public key of the family, of
// an accepted size: RSA of at least 1024 bits, ECDSA on P-256.
func checkPublicKey(f keyFamily, key crypto.PublicKey) error {
	switch k := key.(type) {
	case *rsa.PublicKey:
		if f != familyRSA {
			break
		}
		if k.N == nil || k.N.BitLen() < minRSABits || k.Size() > maxRSABytes {
			return fmt.Errorf("RSA public keys must have %d to %d bits", minRSABits, 8*maxRSABytes)
		}
		return nil
	case *ecdsa.PublicKey:
		if f != familyECDSA {
			break
		}
		if k.Curve != elliptic.P256() {
			return errors.New("the ECDSA key is not on P-256")
		}
		return nil
	case ed25519.PublicKey:
		if f != familyEd25519 {
			break
		}
		if len(k) != ed25519.PublicKeySize {
			return errors.New("an Ed25519 public key is 32 bytes")
		}
		return nil
	}
	return fmt.Errorf("the key is %s, not %s", keyType(key), f)
}

// ParseECDSAPublicKey parses an ECDSA public key on P-256 written as a PEM
// block (`PUBLIC KEY` or `CERTIFICATE`), or as the DER of the key (PKIX)
// in base64 or hex, as SendGrid shows its verification key. Whitespace is
// ignored.
func ParseECDSAPublicKey(s string) (*ecdsa.PublicKey, error) {
	der, pemType, err := pemOrBytes(strings.TrimSpace(s))
	if err != nil {
		return nil, fmt.Errorf("not an ECDSA public key: %v", err)
	}
	var pub any
	if pemType == "CERTIFICATE" {
		cert, cerr := x509.ParseCertificate(der)
		if cerr != nil {
			return nil, errors.New("not an ECDSA public key: the certificate does not parse")
		}
		pub = cert.PublicKey
	} else if pub, err = x509.ParsePKIXPublicKey(der); err != nil {
		return nil, errors.New("not an ECDSA public key: want a PKIX public key")
	}
	key, ok := pub.(*ecdsa.PublicKey)
	if !ok {
		return nil, fmt.Errorf("not an ECDSA public key: the key is %s", keyType(pub))
	}
	if key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("the ECDSA key is on %s, not P-256", key.Curve.Params().Name)
	}
	return key, nil
}

// parsePublicKey parses a public key of the family with the parser of
// its kind.
func parsePublicKey(f keyFamily, s string) (crypto.PublicKey, error) {
	switch f {
	case familyEd25519:
		return ParseEd25519PublicKey(s)
	case familyECDSA:
		return ParseECDSAPublicKey(s)
	case familyRSA:
		return ParseRSAPublicKey(s)
	}
	return nil, errors.New("an HMAC algorithm takes secrets, not public keys")
}

// verifyPublic checks sig over the message msg (for Ed25519) or its
// digest (the others) under key, for the algorithm a. A raw ECDSA
// signature (r||s) is checked as its DER.
func verifyPublic(a *algorithm, key crypto.PublicKey, msg, digest, sig []byte, rawECDSA bool) bool {
	switch k := key.(type) {
	case ed25519.PublicKey:
		return a.family == familyEd25519 && len(sig) == ed25519.SignatureSize && ed25519.Verify(k, msg, sig)
	case *ecdsa.PublicKey:
		if a.family != familyECDSA {
			return false
		}
		if rawECDSA {
			var der [80]byte
			d, ok := rawToDER(der[:0], sig)
			if !ok {
				return false
			}
			sig = d
		}
		return ecdsa.VerifyASN1(k, digest, sig)
	case *rsa.PublicKey:
		if a.family != familyRSA || len(sig) != k.Size() {
			return false
		}
		if a.pss {
			return rsa.VerifyPSS(k, a.hash, digest, sig, &rsa.PSSOptions{SaltLength: rsa.PSSSaltLengthAuto, Hash: a.hash}) == nil
		}
		return rsa.VerifyPKCS1v15(k, a.hash, digest, sig) == nil
	}
	return false
}

// p256Size is the size of each half of a raw P-256 signature.
const p256Size = 32

// rawToDER appends to dst the DER of a raw P-256 signature, r||s of 32
// bytes each (as JOSE and WebCrypto write it): SEQUENCE { INTEGER r,
// INTEGER s }.
func rawToDER(dst, raw []byte) ([]byte, bool) {
	if len(raw) != 2*p256Size {
		return nil, false
	}
	r, s := trimZeros(raw[:p256Size]), trimZeros(raw[p256Size:])
	dst = append(dst, 0x30, byte(derIntegerSize(r)+derIntegerSize(s)))
	return appendDERInteger(appendDERInteger(dst, r), s), true
}

// trimZeros removes the leading zeros of a big-endian number, keeping
// one byte.
func trimZeros(b []byte) []byte {
	for len(b) > 1 && b[0] == 0 {
		b = b[1:]
	}
	return b
}

// derIntegerSize is the size of the DER INTEGER of a trimmed unsigned
// number, tag and length included: a zero byte precedes a high bit.
func derIntegerSize(b []byte) int {
	n := len(b)
	if b[0] >= 0x80 {
		n++
	}
	return 2 + n
}

// appendDERInteger appends the DER INTEGER of a trimmed unsigned number.
func appendDERInteger(dst, b []byte) []byte {
	dst = append(dst, 0x02, byte(derIntegerSize(b)-2))
	if b[0] >= 0x80 {
		dst = append(dst, 0)
	}
	return append(dst, b...)
}

// derToRaw returns the raw r||s of a DER P-256 signature, for the signers.
func derToRaw(der []byte) ([]byte, error) {
	var sig struct{ R, S []byte }
	if !parseDERSignature(der, &sig.R, &sig.S) {
		return nil, errors.New("not a DER ECDSA signature")
	}
	out := make([]byte, 2*p256Size)
	if !fitRight(out[:p256Size], sig.R) || !fitRight(out[p256Size:], sig.S) {
		return nil, errors.New("not a P-256 signature")
	}
	return out, nil
}

// parseDERSignature reads SEQUENCE { INTEGER r, INTEGER s } with short
// lengths, as P-256 signatures are.
func parseDERSignature(der []byte, r, s *[]byte) bool {
	if len(der) < 2 || der[0] != 0x30 || int(der[1]) != len(der)-2 || der[1] >= 0x80 {
		return false
	}
	rest := der[2:]
	for _, out := range []*[]byte{r, s} {
		if len(rest) < 2 || rest[0] != 0x02 || rest[1] >= 0x80 || int(rest[1]) > len(rest)-2 {
			return false
		}
		*out = rest[2 : 2+int(rest[1])]
		rest = rest[2+int(rest[1]):]
	}
	return len(rest) == 0
}

// fitRight copies the big-endian number b into dst, right-aligned, once
// its leading zeros are removed; false when it does not fit.
func fitRight(dst, b []byte) bool {
	for len(b) > 0 && b[0] == 0 {
		b = b[1:]
	}
	if len(b) > len(dst) {
		return false
	}
	copy(dst[len(dst)-len(b):], b)
	return true
}

// CheckAlgorithm returns an error, listing the names there are, unless
// name is an algorithm of NewTemplate (for parsers, before a template is
// built).
func CheckAlgorithm(name string) error {
	_, err := lookupAlgorithm(name)
	return err
}

// CheckTemplatePublicKey returns an error unless s parses as a public key
// of the kind the template algorithm verifies with (for parsers, before a
// template is built).
func CheckTemplatePublicKey(algorithm, s string) error {
	a, err := lookupAlgorithm(algorithm)
	if err != nil {
		return err
	}
	_, err = parsePublicKey(a.family, s)
	return err
}

// IsSymmetric reports whether a template algorithm takes secrets, an
// HMAC or a token (its deliveries can be signed again with the route's
// secret).
func IsSymmetric(name string) bool {
	a, err := lookupAlgorithm(name)
	return err == nil && (a.family == familyHMAC || a.family == familyToken)
}
