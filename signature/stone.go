package signature

import (
	"crypto/rsa"
	"errors"
	"net/http"

	"github.com/go-jose/go-jose/v4"
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

// The only algorithms Stone uses; anything else is refused before any RSA
// operation.
var (
	stoneKeyAlgorithms     = []jose.KeyAlgorithm{jose.RSA_OAEP_256}
	stoneContentEncryption = []jose.ContentEncryption{jose.A256GCM}
	stoneSignature         = []jose.SignatureAlgorithm{jose.RS256}
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
// checked before the private key is used, compressed plaintexts are
// refused, and the JWS must have exactly one RS256 signature whose `kid`
// names a key of the set. Every delivery costs one RSA private-key
// operation (the JWE's key) and one public-key operation.
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
	jwe, err := jose.ParseEncryptedCompact(token, stoneKeyAlgorithms, stoneContentEncryption)
	if err != nil {
		return nil, ErrInvalid
	}
	if _, compressed := jwe.Header.ExtraHeaders["zip"]; compressed {
		return nil, ErrInvalid
	}
	plaintext, err := jwe.Decrypt(v.key)
	if err != nil {
		return nil, ErrInvalid
	}
	jws, err := jose.ParseSignedCompact(string(plaintext), stoneSignature)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, ErrInvalid
	}
	kid := jws.Signatures[0].Header.KeyID
	if kid == "" {
		return nil, ErrInvalid
	}
	pub, err := v.keys.StoneKey(kid)
	if err != nil {
		return nil, err
	}
	payload, err := jws.Verify(pub)
	if err != nil || !gjson.ValidBytes(payload) {
		return nil, ErrInvalid
	}
	return payload, nil
}

// stoneEnvelope returns the compact JWE of a Stone delivery:
// `{"encrypted_body":"<compact JWE>"}`. A body without it is
// ErrMissing; one that is not a JSON object is ErrInvalid.
func stoneEnvelope(body []byte) (string, error) {
	if !gjson.ValidBytes(body) {
		return "", ErrInvalid
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return "", ErrInvalid
	}
	token := root.Get("encrypted_body")
	if token.Type != gjson.String || token.Str == "" {
		return "", ErrMissing
	}
	return token.Str, nil
}

var _ Opener = (*stoneVerifier)(nil)
