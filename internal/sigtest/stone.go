package sigtest

import (
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-jose/go-jose/v4"
)

// Stone delivers `{"encrypted_body":"<compact JWE>"}`: a JWE
// (RSA-OAEP-256, A256GCM) to the partner's public key, around a compact
// JWS (RS256) signed with one of Stone's keys, named by its kid (Stone
// Open Banking, "Webhooks": webhooks seguros). These helpers build such
// deliveries with go-jose, as Stone documents them.

// StoneJWS signs payload as Stone does: compact JWS, alg (RS256 for
// Stone), kid in the protected header.
func StoneJWS(t testing.TB, payload []byte, alg jose.SignatureAlgorithm, key any, kid string) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("JWT")
	if kid != "" {
		opts = opts.WithHeader(jose.HeaderKey("kid"), kid)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, opts)
	if err != nil {
		t.Fatal(err)
	}
	jws, err := signer.Sign(payload)
	return compact(t, jws, err)
}

// StoneJWE encrypts plaintext to the recipient's key as Stone does:
// compact JWE, RSA-OAEP-256 and A256GCM unless other algorithms are given.
func StoneJWE(t testing.TB, plaintext string, alg jose.KeyAlgorithm, enc jose.ContentEncryption, recipient any) string {
	t.Helper()
	encrypter, err := jose.NewEncrypter(enc, jose.Recipient{Algorithm: alg, Key: recipient}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jwe, err := encrypter.Encrypt([]byte(plaintext))
	return compact(t, jwe, err)
}

// compact returns the compact serialization of obj, a JWS or a JWE; it
// fails t when making obj failed (err) or serializing it fails.
func compact(t testing.TB, obj interface{ CompactSerialize() (string, error) }, err error) string {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	s, err := obj.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// StoneBody is the body of a Stone delivery around a compact JWE.
func StoneBody(jwe string) []byte {
	b, _ := json.Marshal(map[string]string{"encrypted_body": jwe})
	return b
}

// StoneDelivery is the body of a genuine-looking Stone delivery: event
// signed by signer under kid, encrypted to recipient.
func StoneDelivery(t testing.TB, event []byte, signer *rsa.PrivateKey, kid string, recipient *rsa.PublicKey) []byte {
	t.Helper()
	return StoneBody(StoneJWE(t, StoneJWS(t, event, jose.RS256, signer, kid), jose.RSA_OAEP_256, jose.A256GCM, recipient))
}

// StoneKeySet is a key set as Stone's discovery endpoint publishes it:
// `{"keys":[…]}` of RSA public JWKs with kid, use and alg.
func StoneKeySet(t testing.TB, keys map[string]*rsa.PrivateKey) []byte {
	t.Helper()
	var set jose.JSONWebKeySet
	for kid, k := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Use: "sig", Algorithm: string(jose.RS256)})
	}
	b, err := json.Marshal(set)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// StoneEvent is an event as Stone documents its payload (a JWT whose
// claims are the event).
const StoneEvent = `{"env":"sandbox","event_type":"cash_in_internal_transfer","id":"54abd61c-3b18-401c-9816-951cbe135149","iat":1589381895,"jti":"2o79sqemde14mv76eo00jsc3","nbf":1589381895,"target_data":{"account_id":"09c016b2-876a-450a-9f40-316f8e2f8778","amount":1,"status":"FINISHED"},"target_type":"internal_transfer"}`

// JWKSServer serves a key set as Stone's discovery endpoint does, and can
// be down; Hits counts its requests.
type JWKSServer struct {
	*httptest.Server
	mu   sync.Mutex
	keys map[string]*rsa.PrivateKey
	down bool
	Hits atomic.Int64
}

// NewJWKSServer starts a key set server holding the public halves of keys,
// closed when the test ends.
func NewJWKSServer(t testing.TB, keys map[string]*rsa.PrivateKey) *JWKSServer {
	t.Helper()
	s := &JWKSServer{keys: keys}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.Hits.Add(1)
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.down {
			http.Error(w, "unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(StoneKeySet(t, s.keys))
	}))
	t.Cleanup(s.Close)
	return s
}

// Set makes the server down (503) or up, serving keys when they are not
// nil.
func (s *JWKSServer) Set(down bool, keys map[string]*rsa.PrivateKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
	if keys != nil {
		s.keys = keys
	}
}

// PartnerKeyFile writes the Stone partner's private key (RSAKey
// "stone-partner") as PKCS #8 PEM in the test's directory.
func PartnerKeyFile(t testing.TB) string {
	t.Helper()
	der, err := x509.MarshalPKCS8PrivateKey(RSAKey("stone-partner"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "stone.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
