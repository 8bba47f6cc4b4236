package signature

import (
	"crypto/rand"
	"crypto/rsa"
	"errors"
	"net/http/httptest"
	"testing"
)

// fuzzStoneKeys is a loaded key set without keys: nothing can be verified.
type fuzzStoneKeys struct{}

func (fuzzStoneKeys) Loaded() bool                            { return true }
func (fuzzStoneKeys) StoneKey(string) (*rsa.PublicKey, error) { return nil, ErrInvalid }

// FuzzStoneOpen checks that no body, however malformed its envelope, JWE
// or JWS, panics the Stone scheme or gets past it, and that every failure
// is one of the package's errors.
func FuzzStoneOpen(f *testing.F) {
	for _, s := range []string{
		`{"encrypted_body":"eyJhbGciOiJSU0EtT0FFUC0yNTYiLCJlbmMiOiJBMjU2R0NNIn0.a.b.c.d"}`,
		`{"encrypted_body":"eyJhbGciOiJSU0ExXzUiLCJlbmMiOiJBMjU2R0NNIn0.a.b.c.d"}`,
		`{"encrypted_body":"....."}`,
		`{"encrypted_body":null}`,
		`{"encrypted_body":"x"}`,
		`[]`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		f.Fatal(err)
	}
	v, err := NewStone(key, fuzzStoneKeys{})
	if err != nil {
		f.Fatal(err)
	}
	r := httptest.NewRequest("POST", "/", nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		payload, err := v.Open(r, body)
		if err == nil || payload != nil {
			t.Fatalf("accepted %q", body)
		}
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrMissing) && !errors.Is(err, ErrAmbiguous) {
			t.Fatalf("error %v", err)
		}
	})
}

// FuzzJWT checks that no Authorization header panics the JWT scheme or
// passes it without the secret.
func FuzzJWT(f *testing.F) {
	for _, s := range []string{
		"Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJpYXQiOjE3NjcyMjU2MDAsImV4cCI6MTc2NzIyNjIwMH0.x",
		"Bearer eyJhbGciOiJub25lIn0.eyJleHAiOjF9.",
		"bearer a.b.c", "Bearer ", "Bearer ...", "Basic x",
	} {
		f.Add(s)
	}
	v, err := NewJWT("", "", []string{"fuzz-secret"}, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, h string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header["Authorization"] = []string{h}
		err := v.Verify(r, nil)
		if err == nil {
			t.Fatalf("accepted %q", h)
		}
		if !errors.Is(err, ErrInvalid) && !errors.Is(err, ErrMissing) && !errors.Is(err, ErrTimestamp) {
			t.Fatalf("error %v", err)
		}
	})
}
