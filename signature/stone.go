package signature

import (
	"bytes"
	"crypto"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
	"unsafe"

	"github.com/tidwall/gjson"
)

// Stone's published signing key sets (Stone Open Banking, "Webhooks":
// webhooks seguros; stone-co/go-stone-openbank, webhook.go).
const (
	StoneProductionKeys = "https://api.openbank.stone.com.br/api/v1/discovery/keys"
	StoneSandboxKeys    = "https://sandbox-api.openbank.stone.com.br/api/v1/discovery/keys"
)

// StoneKeys gives Stone's signing keys. It is implemented by whoever
// fetches and caches Stone's key set; its methods are called on every
// delivery and must not wait on the network.
type StoneKeys interface {
	// Loaded reports whether a key set is loaded. While none is, Open
	// returns ErrUnavailable without decrypting anything.
	Loaded() bool

	// StoneKey returns the RSA public key Stone signs with under kid: a
	// key of the set whose use is `sig` (or unset). It returns
	// ErrInvalid when the set has no such key (an implementation may
	// then refresh the set in the background) and ErrUnavailable when no
	// set is loaded.
	StoneKey(kid string) (*rsa.PublicKey, error)
}

// The only algorithms Stone uses (JWE `alg` and `enc`, JWS `alg`); anything
// else is refused before any RSA operation.
const (
	stoneKeyAlgorithm      = "RSA-OAEP-256"
	stoneContentEncryption = "A256GCM"
	stoneSignature         = "RS256"
)

// Sizes of A256GCM (RFC 7518, 5.3): a 256-bit key, a 96-bit IV and a
// 128-bit tag.
const (
	stoneCEKSize = 32
	stoneIVSize  = 12
	stoneTagSize = 16
)

// NewStone returns Stone's scheme. Stone posts
// `{"encrypted_body":"<compact JWE>"}`: a JWE (RSA-OAEP-256, A256GCM)
// encrypted to the partner application's public key, whose plaintext is a
// compact JWS (RS256) signed with one of Stone's keys, named by its `kid`
// (Stone Open Banking, "Webhooks": webhooks seguros; Stone's Go SDK,
// stone-co/go-stone-openbank DecryptAndValidateWebhook, does the same).
// privateKey is the partner's RSA private key, the pair of the public key
// registered with Stone; keys gives Stone's signing keys.
//
// Decrypting proves nothing, since anyone can encrypt to a public key: the
// RS256 signature is the authentication. The JWE's `alg` and `enc` are
// checked before the private key is used, compressed plaintexts and
// critical header parameters are refused, and the JWS's `kid` must name a
// key of the set. Every delivery costs one RSA private-key operation (the
// JWE's key) and one public-key operation. An envelope with two
// `encrypted_body` members is ErrAmbiguous: one reader would open the
// first, another the last.
//
// Only this one profile of JOSE is read, so the scheme decodes as little
// as it can: the envelope and the JWE's parts are read where they are in
// the body, the ciphertext is decrypted in place, the signature is checked
// on the JWS as it is, and only then is the payload decoded. Beyond the
// body, a delivery costs about 0.75 times its size while it is checked,
// and the event's size more once it passes (BenchmarkStoneOpenLarge).
//
// Open returns the JWS payload (the event's JSON); Verify discards it.
// Stone's JWT time claims are not checked: Stone retries a delivery for a
// day, and its documentation says nothing of re-signing retries.
func NewStone(privateKey *rsa.PrivateKey, keys StoneKeys) (Opener, error) {
	if privateKey == nil {
		return nil, errors.New("no private key")
	}
	if privateKey.N.BitLen() < 2048 {
		return nil, errors.New("the private key is shorter than 2048 bits")
	}
	if keys == nil {
		return nil, errors.New("no signing key set")
	}
	return &stoneVerifier{key: privateKey, keys: keys}, nil
}

// stoneVerifier is the scheme of NewStone.
type stoneVerifier struct {
	key  *rsa.PrivateKey
	keys StoneKeys
}

// Verify implements Verifier.
func (v *stoneVerifier) Verify(r *http.Request, body []byte) error {
	_, err := v.Open(r, body)
	return err
}

// Open implements Opener.
func (v *stoneVerifier) Open(_ *http.Request, body []byte) ([]byte, error) {
	token, err := stoneEnvelope(body)
	if err != nil {
		return nil, err
	}
	if !v.keys.Loaded() {
		return nil, ErrUnavailable
	}
	jws, err := v.decrypt(token)
	if err != nil {
		return nil, err
	}
	return v.verifyJWS(jws)
}

// decrypt opens a compact JWE (RSA-OAEP-256, A256GCM) with the partner's
// key and returns its plaintext, decrypted in the buffer its ciphertext
// was decoded into. token is not modified.
func (v *stoneVerifier) decrypt(token []byte) ([]byte, error) {
	var parts [5][]byte
	if !splitCompact(token, parts[:]) {
		return nil, ErrInvalid
	}
	header, ok := decodeSmall(parts[0])
	if !ok || !stoneHeader(header, "enc", stoneContentEncryption, stoneKeyAlgorithm) {
		return nil, ErrInvalid
	}
	if hasMember(header, "zip") {
		// a compressed plaintext could expand far beyond max_body
		return nil, ErrInvalid
	}
	encryptedKey, ok := decodeSmall(parts[1])
	if !ok {
		return nil, ErrInvalid
	}
	iv, ok1 := decodeSmall(parts[2])
	tag, ok2 := decodeSmall(parts[4])
	if !ok1 || !ok2 || len(iv) != stoneIVSize || len(tag) != stoneTagSize {
		return nil, ErrInvalid
	}
	cek, err := rsa.DecryptOAEP(sha256.New(), nil, v.key, encryptedKey, nil)
	if err != nil || len(cek) != stoneCEKSize {
		return nil, ErrInvalid
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, ErrInvalid
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, ErrInvalid
	}
	// the ciphertext and its tag in one buffer, opened in place
	sealed := make([]byte, base64.RawURLEncoding.DecodedLen(len(parts[3]))+stoneTagSize)
	n, err := base64.RawURLEncoding.Decode(sealed, parts[3])
	if err != nil {
		return nil, ErrInvalid
	}
	sealed = append(sealed[:n], tag...)
	// the additional data is the protected header as it was sent
	plaintext, err := aead.Open(sealed[:0], iv, sealed, parts[0])
	if err != nil {
		return nil, ErrInvalid
	}
	return plaintext, nil
}

// verifyJWS checks a compact JWS (RS256) against Stone's key named by its
// kid, on the JWS as it is, and only then decodes its payload, which it
// returns: a forged JWS costs no decoding.
func (v *stoneVerifier) verifyJWS(jws []byte) ([]byte, error) {
	var parts [3][]byte
	if !splitCompact(jws, parts[:]) {
		return nil, ErrInvalid
	}
	header, ok := decodeSmall(parts[0])
	if !ok || !stoneHeader(header, "", "", stoneSignature) {
		return nil, ErrInvalid
	}
	kid, ok := uniqueMember(header, "kid")
	if !ok || kid.Type != gjson.String || kid.Str == "" {
		return nil, ErrInvalid
	}
	pub, err := v.keys.StoneKey(kid.Str)
	if err != nil {
		return nil, err
	}
	sig, ok := decodeSmall(parts[2])
	if !ok {
		return nil, ErrInvalid
	}
	// the signing input: the header and payload as they were sent
	digest := sha256.Sum256(jws[:len(parts[0])+1+len(parts[1])])
	if rsa.VerifyPKCS1v15(pub, crypto.SHA256, digest[:], sig) != nil {
		return nil, ErrInvalid
	}
	payload := make([]byte, base64.RawURLEncoding.DecodedLen(len(parts[1])))
	n, err := base64.RawURLEncoding.Decode(payload, parts[1])
	if err != nil || !gjson.ValidBytes(payload[:n]) {
		return nil, ErrInvalid
	}
	return payload[:n], nil
}

// splitCompact splits a compact serialization into exactly len(parts)
// dot-separated parts, each a slice of s.
func splitCompact(s []byte, parts [][]byte) bool {
	for i := range len(parts) - 1 {
		dot := bytes.IndexByte(s, '.')
		if dot < 0 {
			return false
		}
		parts[i], s = s[:dot], s[dot+1:]
	}
	if bytes.IndexByte(s, '.') >= 0 {
		return false
	}
	parts[len(parts)-1] = s
	return true
}

// maxSmallPart bounds the parts of a JWE or JWS that are decoded whole
// besides the ciphertext and payload: headers, the encrypted key, the IV,
// the tag and the signature (an RSA-8192 signature is 1,366 characters).
const maxSmallPart = 4096

// decodeSmall decodes a base64url part of at most maxSmallPart characters.
func decodeSmall(part []byte) ([]byte, bool) {
	if len(part) > maxSmallPart {
		return nil, false
	}
	out := make([]byte, base64.RawURLEncoding.DecodedLen(len(part)))
	n, err := base64.RawURLEncoding.Decode(out, part)
	if err != nil {
		return nil, false
	}
	return out[:n], true
}

// stoneHeader checks a protected header: a JSON object whose `alg` is alg,
// whose name member (when name is not "") is value, each given once, and
// which has no `crit` (no extension is understood, so none may be
// required).
func stoneHeader(header []byte, name, value, alg string) bool {
	if !gjson.ValidBytes(header) || !gjson.ParseBytes(header).IsObject() || hasMember(header, "crit") {
		return false
	}
	if a, ok := uniqueMember(header, "alg"); !ok || a.Type != gjson.String || a.Str != alg {
		return false
	}
	if name != "" {
		if v, ok := uniqueMember(header, name); !ok || v.Type != gjson.String || v.Str != value {
			return false
		}
	}
	return true
}

// hasMember reports whether the JSON object has a member of this name.
func hasMember(object []byte, name string) bool {
	return gjson.GetBytes(object, gjson.Escape(name)).Exists()
}

// uniqueMember returns the member of the JSON object named name; ok is
// false when it has none, or more than one (names compared without regard
// to case, as Go's encoding/json matches them). The result is a view of
// object.
func uniqueMember(object []byte, name string) (member gjson.Result, ok bool) {
	n := 0
	gjson.Parse(bytesView(object)).ForEach(func(k, v gjson.Result) bool {
		if strings.EqualFold(k.Str, name) {
			n++
			if k.Str == name {
				member = v
			}
		}
		return n < 2
	})
	return member, n == 1 && member.Exists()
}

// stoneEnvelope returns the compact JWE of a Stone delivery,
// `{"encrypted_body":"<compact JWE>"}`, as a slice of body. A body without
// it is ErrMissing; one that is not a JSON object is ErrInvalid; one that
// gives the member twice is ErrAmbiguous.
func stoneEnvelope(body []byte) ([]byte, error) {
	if !gjson.ValidBytes(body) {
		return nil, ErrInvalid
	}
	root := gjson.Parse(bytesView(body))
	if !root.IsObject() {
		return nil, ErrInvalid
	}
	var token gjson.Result
	n := 0
	root.ForEach(func(k, v gjson.Result) bool {
		if strings.EqualFold(k.Str, "encrypted_body") {
			n++
			if k.Str == "encrypted_body" {
				token = v
			}
		}
		return n < 2
	})
	if n > 1 {
		return nil, ErrAmbiguous
	}
	if token.Type != gjson.String || token.Str == "" {
		return nil, ErrMissing
	}
	if len(token.Raw) == len(token.Str)+2 {
		// no escapes: the string as it is in the body
		return stringBytes(token.Str), nil
	}
	return []byte(token.Str), nil
}

// bytesView is b as a string, without a copy: b must not change while the
// string is in use.
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// stringBytes is s as bytes, without a copy: they must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

var _ Opener = (*stoneVerifier)(nil)
