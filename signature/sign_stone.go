package signature

import (
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/go-jose/go-jose/v4"
)

// NewStoneSigner signs as Stone does (NewStone): the body, the event's
// JSON, is signed as a compact JWS (RS256, the key's kid in its protected
// header) with signingKey, encrypted as a compact JWE (RSA-OAEP-256,
// A256GCM) to the partner's public key, and sent as
// `{"encrypted_body":"<JWE>"}`. Stone alone holds its signing keys: a
// route checks this signer's deliveries when its key set (jwks_file) has
// the public half of signingKey under kid and its private_key is the pair
// of partner.
func NewStoneSigner(signingKey *rsa.PrivateKey, kid string, partner *rsa.PublicKey) (Signer, error) {
	if signingKey == nil || partner == nil {
		return nil, errors.New("stone signs with Stone's RSA signing key and encrypts to the partner's RSA public key: both are needed")
	}
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: signingKey}, opts)
	if err != nil {
		return nil, err
	}
	encrypter, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.RSA_OAEP_256, Key: partner}, nil)
	if err != nil {
		return nil, err
	}
	return SignerFunc(func(r *http.Request, body []byte, _ time.Time) ([]byte, error) {
		jws, err := signer.Sign(body)
		if err != nil {
			return nil, err
		}
		token, err := jws.CompactSerialize()
		if err != nil {
			return nil, err
		}
		jwe, err := encrypter.Encrypt([]byte(token))
		if err != nil {
			return nil, err
		}
		sealed, err := jwe.CompactSerialize()
		if err != nil {
			return nil, err
		}
		r.Header.Set("Content-Type", "application/json")
		return json.Marshal(map[string]string{"encrypted_body": sealed})
	}), nil
}

// StoneKeySet returns the key set, as Stone's discovery endpoint publishes
// it (`{"keys":[…]}`, use `sig`, alg RS256), that holds the public half of
// a signing key under kid: a route's jwks_file for NewStoneSigner's key.
func StoneKeySet(signingKey *rsa.PrivateKey, kid string) ([]byte, error) {
	return json.Marshal(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{
		Key: &signingKey.PublicKey, KeyID: kid, Use: "sig", Algorithm: string(jose.RS256),
	}}})
}
