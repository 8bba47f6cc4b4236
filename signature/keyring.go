package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/subtle"
	"hash"
	"sync"
)

// macKey computes one secret's MAC. Hash states are pooled: Verify runs
// concurrently, and a keyed HMAC state is expensive to rebuild.
type macKey struct {
	pool sync.Pool // of *macState
	pre  []byte    // written after every reset (the token of a keyed digest)
}

// macState is a pooled hash state and room for its sum.
type macState struct {
	h   hash.Hash
	sum [sha512.Size]byte
}

// keyring holds one macKey per secret (rotation).
type keyring []*macKey

// newHMACKeyring precomputes an HMAC key per secret.
func newHMACKeyring(newHash func() hash.Hash, secrets [][]byte) keyring {
	kr := make(keyring, len(secrets))
	for i, secret := range secrets {
		kr[i] = &macKey{pool: sync.Pool{New: func() any {
			return &macState{h: hmac.New(newHash, secret)}
		}}}
	}
	return kr
}

// newDigestKeyring builds keys that hash `{secret}{sep}{message}` with a
// plain digest instead of an HMAC (PagBank).
func newDigestKeyring(newHash func() hash.Hash, secrets []string, sep string) keyring {
	kr := make(keyring, len(secrets))
	for i, secret := range secrets {
		kr[i] = &macKey{
			pool: sync.Pool{New: func() any { return &macState{h: newHash()} }},
			pre:  []byte(secret + sep),
		}
	}
	return kr
}

// rawSecrets returns the secrets as the bytes they are written with.
func rawSecrets(secrets []string) [][]byte {
	keys := make([][]byte, len(secrets))
	for i, s := range secrets {
		keys[i] = []byte(s)
	}
	return keys
}

// match reports whether the MAC of msg followed by body, under any key,
// equals any of sigs. Every comparison is constant-time.
func (kr keyring) match(msg, body []byte, sigs *sigSet) bool {
	return kr.matchTail(msg, body, nil, sigs)
}

// matchTail is match for a message that continues after the body
// (HubSpot signs `{method}{url}{body}{timestamp}`).
func (kr keyring) matchTail(msg, body, tail []byte, sigs *sigSet) bool {
	return kr.matchFunc(sigs, func(h hash.Hash) {
		h.Write(msg)
		h.Write(body)
		h.Write(tail)
	})
}

// matchFunc is match for a message that write writes into a hash state
// (a template's, whose parts are not contiguous).
func (kr keyring) matchFunc(sigs *sigSet, write func(h hash.Hash)) bool {
	if sigs.n == 0 {
		return false
	}
	for _, k := range kr {
		st := k.pool.Get().(*macState)
		st.h.Reset()
		if len(k.pre) > 0 {
			st.h.Write(k.pre)
		}
		write(st.h)
		sum := st.h.Sum(st.sum[:0])
		ok := 0
		for i := 0; i < sigs.n; i++ {
			ok |= subtle.ConstantTimeCompare(sum, sigs.sig[i][:sigs.size[i]])
		}
		k.pool.Put(st)
		if ok == 1 {
			return true
		}
	}
	return false
}

// check is match as an error: nil, or ErrInvalid.
func (kr keyring) check(msg, body []byte, sigs *sigSet) error {
	return kr.checkTail(msg, body, nil, sigs)
}

// checkTail is matchTail as an error: nil, or ErrInvalid.
func (kr keyring) checkTail(msg, body, tail []byte, sigs *sigSet) error {
	if !kr.matchTail(msg, body, tail, sigs) {
		return ErrInvalid
	}
	return nil
}

// tokenSet holds the SHA-256 of each accepted token; comparing digests in
// constant time does not reveal a token's length.
type tokenSet [][sha256.Size]byte

func newTokenSet(secrets []string) tokenSet {
	ts := make(tokenSet, len(secrets))
	for i, s := range secrets {
		ts[i] = sha256.Sum256([]byte(s))
	}
	return ts
}

// match reports whether v is one of the tokens.
func (ts tokenSet) match(v string) bool {
	got := sha256.Sum256([]byte(v))
	ok := 0
	for i := range ts {
		ok |= subtle.ConstantTimeCompare(got[:], ts[i][:])
	}
	return ok == 1
}

// scratchPool holds buffers for the signed message that precedes the body
// (`{t}.`, `v0:{ts}:`, a URL, …).
var scratchPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 512)
	return &b
}}

func getScratch() *[]byte { return scratchPool.Get().(*[]byte) }

func putScratch(b *[]byte) {
	if cap(*b) > 64<<10 {
		return // do not keep a buffer a huge URL grew
	}
	*b = (*b)[:0]
	scratchPool.Put(b)
}
