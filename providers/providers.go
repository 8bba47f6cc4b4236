// Package providers holds the provider presets of the webhook_idempotency
// handler (docs/providers.md) and the generic verification schemes they are
// built from. Each provider is one declaration, in a file of its own: its
// scheme over package signature's blocks, its default key, handshake,
// retry window, payload limit, redactions, published addresses, how the
// send command signs as it, and the pages it was checked against; what a
// provider needs beyond a declaration (Stone's JWE and key set, Efí's
// mutual TLS rule, Discord's PINGs) sits in its file too. The handler asks
// for a preset or a scheme by name and never names a provider, so adding a
// preset touches one file here plus its test vectors.
package providers

import (
	"net/http"
	"slices"
	"strings"
	"time"
)

// Preset is one provider's declaration. Presets are shared: a caller must
// not modify one, nor the slices it holds.
type Preset struct {
	// Name is the preset's name, its source by default (`stripe`).
	Name string

	// Docs are the provider's pages and sources the preset was checked
	// against (docs/providers.md cites them).
	Docs []string

	// Block is the verify block the preset's scheme equals, for a preset
	// declared over the generic blocks (`template { … }` or `jwt { … }`):
	// the route adds its key material (docs/providers.md shows each
	// preset's block). Empty for a preset with a scheme of its own.
	Block string

	// DefaultKey is the key chain used when the handler sets none; it
	// always ends with `body`.
	DefaultKey []string

	// TTL is the default ttl when the provider retries for longer than
	// the handler's default (docs/providers.md: retries); zero keeps it.
	TTL time.Duration

	// InFlight is the default in_flight mode; empty keeps the handler's.
	InFlight string

	// Timeout is how long the provider waits for an answer to a delivery
	// before it counts the delivery as failed, as it documents it
	// (docs/providers.md: Timeouts); zero when it documents none. An
	// inbox's `respond app` takes its deadline from it.
	Timeout time.Duration

	// MaxBody is the default max_body, from the provider's documented
	// maximum payload; zero keeps the handler's (5MiB).
	MaxBody int64

	// Volatile are headers the provider sets anew on every delivery
	// attempt (signatures over a timestamp): a key taken from one of them
	// never deduplicates a retry.
	Volatile []string

	// Signed are the key sources the signature covers besides the body:
	// `header:<Name>` (a delivery id signed with the body), or `query:*`
	// when the signed URL carries the query. A header or query key not
	// listed is claimed with the body's key (the replay guard).
	Signed []string

	// BodyUnsigned marks a scheme that signs no body (a shared token sent
	// as it is, or a signature over ids alone): no key of it is guarded.
	BodyUnsigned bool

	// Redact are the credentials the provider puts in its bodies, as
	// `redact` rules the archive always applies (docs/providers.md:
	// Credentials in bodies).
	Redact []string

	// Addresses is where the provider publishes the addresses it sends
	// from, in a form that can be fetched (`allow_ips <provider>`); nil
	// when it publishes none (docs/providers.md: Published addresses).
	Addresses *AddressList

	// Handshake is the provider's handshake, answered at the edge; nil
	// when it has none.
	Handshake *Handshake

	// Success is the answer the provider expects of an accepted delivery
	// when it asks for more than a status (Adyen's `[accepted]`): an
	// inbox's answer to what it accepts, and its duplicates'. Nil: the
	// inbox's `respond` status with no body.
	Success *Answer

	// Nonce is a key source (`json:<path>`, `header:<Name>`) whose value
	// the provider uses once: a delivery whose nonce was seen within ttl
	// under another key is answered as a duplicate of the first, as a
	// replay of captured credentials (Mailgun's token, whose signature
	// does not cover the body). Empty for none.
	Nonce string

	// Batch is where a provider that sends several events in one request
	// puts them, and each one's stable id (docs/providers.md: Batches);
	// nil for a provider that sends one event per request.
	Batch *Batch

	// Edge checks a route's allow_ips and client_cert against what the
	// provider needs; nil for no rule.
	Edge func(EdgeConfig) (warning string, err error)

	// Credentials are the headers that carry the provider's signature or
	// credential, with the timestamp it signs, and CredentialQuery the
	// query parameters that do: what `forward` removes (strip, edge) or
	// replaces (resign), and what the inbox does not store unless the
	// route forwards with keep (docs/inbox.md: What the application
	// receives).
	Credentials     []string
	CredentialQuery []string

	// needs, for a preset declared as a block, rejects a route that
	// lacks what the preset cannot do without besides key material
	// (Pub/Sub's audience and service account); nil for nothing more.
	needs func(cfg VerifyConfig) error

	// refuse, for a preset declared as a block, refuses before its block
	// the deliveries the block would only call unsigned, with a reason of
	// their own (Amazon SNS's raw messages); nil for none.
	refuse func(r *http.Request, body []byte) error

	// resigns tells whether the preset's signer re-signs a delivery, with
	// the secret that verified it and a new time, without changing its
	// body (forward signature resign); nil for never (a public key, a
	// token, a timestamp inside the body).
	resigns func(cfg VerifyConfig) bool

	scheme scheme
	signer presetSigner
	decl   *VerifyConfig // Block, parsed
	// examples is how the provider sends the example payloads embedded
	// in examples/ (examples.go); nil when none are.
	examples *examplesRule
}

// Answer is an HTTP answer: status, content type and body.
type Answer struct {
	Status      int
	ContentType string
	Body        string
}

// Batch is a provider's batch, which the handler's `batch` option takes
// as its default (docs/caddyfile.md: Batches).
type Batch struct {
	// Path is the array of events: `json:<path>`, `json:#` for a body
	// that is the array.
	Path string

	// Key lists an item's key sources, alternatives tried in order: `body`
	// (the item's own bytes, hashed), or one or more `json:<path within
	// the item>` joined by `+`, one key made of them all (the values
	// joined by `+`, a `+` or `\` in a value escaped by `\`; an absent
	// part empty, and the whole source absent only when every part is),
	// for an item known only by several members.
	Key []string
}

// AddressList is where a provider publishes the addresses it sends from:
// a URL serving JSON, and the field of the JSON that holds the ranges (""
// for a top-level list).
type AddressList struct {
	URL   string
	Field string
}

// EdgeConfig is what a preset's edge rule looks at of a route.
type EdgeConfig struct {
	// ClientCert tells whether the route requires a client certificate,
	// and ClientCertCAs how many CAs it gives for it.
	ClientCert    bool
	ClientCertCAs int
	// VerifyOff is `verify off`; Secrets the number of secrets given.
	VerifyOff bool
	Secrets   int
	// AllowIPs tells whether the route has an address allow list.
	AllowIPs bool
}

// presets maps each preset name to its declaration; each provider's file
// registers its own.
var presets = map[string]*Preset{}

// register adds a preset at init; a name registered twice is a bug.
func register(p *Preset) {
	if _, dup := presets[p.Name]; dup {
		panic("providers: preset " + p.Name + " registered twice")
	}
	if n := len(p.DefaultKey); n == 0 || p.DefaultKey[n-1] != "body" {
		panic("providers: preset " + p.Name + "'s default key must end with body")
	}
	if p.Block != "" {
		s, decl := blockScheme(p.Block)
		if p.needs != nil || p.refuse != nil {
			s.build = guarded(s.build, p.needs, p.refuse)
		}
		p.scheme, p.decl = s, &decl
		if p.signer.build == nil {
			p.signer = declSigner(decl)
		}
		if p.resigns == nil && decl.resignable() {
			p.resigns = always
		}
		if p.Credentials == nil && p.CredentialQuery == nil {
			p.Credentials, p.CredentialQuery = decl.credentials()
		}
	}
	presets[p.Name] = p
}

// Lookup returns the preset of a name.
func Lookup(name string) (*Preset, bool) {
	p, ok := presets[name]
	return p, ok
}

// Names returns the names of every preset, sorted.
func Names() []string {
	names := make([]string, 0, len(presets))
	for name := range presets {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// All returns every preset, sorted by name.
func All() []*Preset {
	out := make([]*Preset, 0, len(presets))
	for _, name := range Names() {
		out = append(out, presets[name])
	}
	return out
}

// day is 24 hours.
const day = 24 * time.Hour

// VolatileHeader reports whether a header changes on every delivery
// attempt of some provider, and which: prefer, when it lists the header,
// else the first such provider by name.
func VolatileHeader(name, prefer string) (string, bool) {
	if p, ok := presets[prefer]; ok {
		for _, v := range p.Volatile {
			if strings.EqualFold(v, name) {
				return prefer, true
			}
		}
	}
	for _, p := range All() {
		for _, v := range p.Volatile {
			if strings.EqualFold(v, name) {
				return p.Name, true
			}
		}
	}
	return "", false
}

// Redactions are the redact rules of a scheme's provider ("" or a
// generic scheme: none).
func Redactions(scheme string) []string {
	if p, ok := presets[scheme]; ok {
		return p.Redact
	}
	return nil
}

// TokenPlaces are the header and the query parameter a route's scheme
// reads a secret from as it is sent (a token compared as written, a
// bearer JWT), not a signature over the body: credentials an archive or a
// log never shows (docs/archive.md: Redaction). The fixed ones
// (Authorization, X-Gitlab-Token, …) are internal/redact's SecretHeaders.
func TokenPlaces(cfg VerifyConfig) (headers, query []string) {
	switch cfg.Scheme {
	case "token", "jwt", "evolution", "gitlab", "asaas", "eventgrid":
	default:
		return nil, nil
	}
	if cfg.Header != "" {
		headers = []string{cfg.Header}
	}
	if cfg.Query != "" {
		query = []string{cfg.Query}
	}
	return headers, query
}

// MaxBody is the default max_body of a scheme: its provider's, zero for a
// generic scheme or a preset that keeps the handler's.
func MaxBody(scheme string) int64 {
	if p, ok := presets[scheme]; ok {
		return p.MaxBody
	}
	return 0
}

// SignedKeys says what a scheme's signature covers: whether it covers the
// body at all (a shared token or a JWT over claims does not), and which key
// sources it covers besides the body (Preset.Signed).
func SignedKeys(scheme string) (signed []string, bodySigned bool) {
	switch scheme {
	case "hmac", "ed25519", "rsa":
		// generic schemes over the body alone
		return nil, true
	case "token", "jwt":
		// a shared token, or a JWT over claims alone
		return nil, false
	}
	p, ok := presets[scheme]
	if !ok {
		return nil, false
	}
	return p.Signed, !p.BodyUnsigned
}
