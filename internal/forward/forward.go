// Package forward is the handoff to the application (docs/inbox.md: What
// the application receives): what a delivery carries when the module hands
// it on — to the next handler, in an inbox attempt, a redelivery or a
// reconciled event — so that the application's own signature check passes
// however late it comes. A route's Forwarder keeps the provider's
// signature (`keep`), recomputes it as the provider does with the secret
// that verified the delivery and the attempt's time (`resign`), replaces it
// with a Standard Webhooks signature of the module's (`edge`), or removes
// it (`strip`), and adds the route's outbound headers.
package forward

import (
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strings"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// Mode is what a route does with the provider's signature.
type Mode uint8

const (
	// Keep passes the provider's headers on as received.
	Keep Mode = iota
	// Resign recomputes the provider's own signature at each attempt.
	Resign
	// Edge signs as a Standard Webhooks sender, with the route's secrets.
	Edge
	// Strip removes the provider's signature.
	Strip
)

var modes = cfparse.Keywords[Mode]{{Word: "keep", Value: Keep}, {Word: "resign", Value: Resign}, {Word: "edge", Value: Edge}, {Word: "strip", Value: Strip}}

// ParseMode parses `keep`, `resign`, `edge` or `strip`.
func ParseMode(v string) (Mode, error) { return modes.Parse("forward signature", v) }

// String returns the mode as it is configured.
func (m Mode) String() string {
	for _, k := range modes {
		if k.Value == m {
			return k.Word
		}
	}
	return "keep"
}

// Resigner signs r, whose body is body, as the provider does, with the
// route's secret of index secret (the one that verified the delivery; 0
// when it is not known) at time at; publicURL is the URL the provider sent
// the delivery to, for the schemes that sign it.
type Resigner func(r *http.Request, body []byte, publicURL string, secret int, at time.Time) error

// SourceHeader names the route's source on a request signed with Edge.
const SourceHeader = "Webhook-Source"

// Header is an outbound header the route adds to every request to the
// application; Value is resolved (it may hold a secret: it is never
// stored or shown).
type Header struct {
	Name, Value string
}

// Config is a route's resolved forward configuration.
type Config struct {
	Mode   Mode
	Source string
	// Credentials are the headers that carry the provider's signature
	// and its credentials (a token, a signed timestamp): removed by Edge
	// and Strip, replaced by Resign, and left out of the inbox's stored
	// copy of an event unless the mode is Keep.
	Credentials []string
	// CredentialQuery are the query parameters that carry a credential
	// (a token in the URL), treated as Credentials are.
	CredentialQuery []string
	// Resign re-signs for Resign.
	Resign Resigner
	// EdgeSecrets are the `whsec_` secrets Edge signs with (every one, for
	// rotation).
	EdgeSecrets []string
	// Headers are added to every request to the application.
	Headers []Header
}

// Forwarder prepares the requests a route hands to the application.
type Forwarder struct {
	cfg         Config
	credentials map[string]bool // canonical names
	edge        []signature.Signer
}

// New builds a route's forwarder; errors name the option.
func New(cfg Config) (*Forwarder, error) {
	f := &Forwarder{cfg: cfg, credentials: make(map[string]bool, len(cfg.Credentials))}
	for _, h := range cfg.Credentials {
		f.credentials[textproto.CanonicalMIMEHeaderKey(h)] = true
	}
	switch cfg.Mode {
	case Resign:
		if cfg.Resign == nil {
			return nil, errors.New("forward signature resign: the scheme cannot be re-signed")
		}
	case Edge:
		if len(cfg.EdgeSecrets) == 0 {
			return nil, errors.New("forward signature edge needs at least one secret (whsec_ and base64, as Standard Webhooks secrets are written)")
		}
		for i, s := range cfg.EdgeSecrets {
			signer, err := signature.NewStandardWebhooksSigner("webhook-", s)
			if err != nil {
				return nil, fmt.Errorf("forward signature edge secret %d: %v", i+1, err)
			}
			f.edge = append(f.edge, signer)
		}
	}
	for _, h := range cfg.Headers {
		if h.Name == "" {
			return nil, errors.New("forward header needs a name")
		}
	}
	return f, nil
}

// Mode returns the route's mode.
func (f *Forwarder) Mode() Mode { return f.cfg.Mode }

// Stores reports whether the inbox's stored copy of an event keeps a
// header: a credential only when the route forwards with Keep, so nothing
// the application will not receive is written to a store.
func (f *Forwarder) Stores(name string) bool {
	return f.cfg.Mode == Keep || !f.credentials[textproto.CanonicalMIMEHeaderKey(name)]
}

// StoresQuery reports whether the stored copy of an event keeps a query
// parameter, as Stores does a header.
func (f *Forwarder) StoresQuery(name string) bool {
	if f.cfg.Mode == Keep {
		return true
	}
	for _, q := range f.cfg.CredentialQuery {
		if q == name {
			return false
		}
	}
	return true
}

// CredentialQuery returns the query parameters that carry a credential.
func (f *Forwarder) CredentialQuery() []string { return f.cfg.CredentialQuery }

// Delivery is what Apply needs to know of the delivery it hands on.
type Delivery struct {
	// Key is the delivery's key, its id toward the application.
	Key string
	// Secret is the index of the route's secret that verified it.
	Secret int
	// PublicURL is the URL the provider sent it to.
	PublicURL string
}

// Apply prepares r, whose body is body, for the application at time at. It
// adds the route's outbound headers last, over any the request carries.
// With Edge it removes every webhook-* header r carries but Webhook-Via,
// so the headers the module itself tells the application are set after.
func (f *Forwarder) Apply(r *http.Request, body []byte, d Delivery, at time.Time) error {
	switch f.cfg.Mode {
	case Resign:
		if err := f.cfg.Resign(r, body, d.PublicURL, d.Secret, at); err != nil {
			return fmt.Errorf("re-signing: %v", err)
		}
	case Edge:
		f.strip(r)
		for name := range r.Header {
			// a webhook-* header from outside must never pass for the
			// module's own: the callers set theirs (Webhook-Attempt,
			// Webhook-Replay-Suspected, Webhook-Order-Broken) after Apply.
			// Webhook-Via stays: it is the hops a delivery took, which
			// tell a route that a request came back to it.
			if len(name) >= len("webhook-") && strings.EqualFold(name[:len("webhook-")], "webhook-") && !strings.EqualFold(name, "Webhook-Via") {
				r.Header.Del(name)
			}
		}
		r.Header.Set("webhook-id", d.Key)
		// one secret's signature is the header its signer set; several
		// are listed together, as Standard Webhooks lists them
		var sigs []string
		if len(f.edge) > 1 {
			sigs = make([]string, 0, len(f.edge))
		}
		for _, s := range f.edge {
			if _, err := s.Sign(r, body, at); err != nil {
				return fmt.Errorf("signing: %v", err)
			}
			if sigs != nil {
				sigs = append(sigs, r.Header.Get("webhook-signature"))
			}
		}
		if sigs != nil {
			r.Header.Set("webhook-signature", strings.Join(sigs, " "))
		}
		r.Header.Set(SourceHeader, f.cfg.Source)
	case Strip:
		f.strip(r)
	}
	for _, h := range f.cfg.Headers {
		r.Header.Set(h.Name, h.Value)
	}
	return nil
}

// strip removes the provider's credentials from r: its credential headers
// and query parameters.
func (f *Forwarder) strip(r *http.Request) {
	for name := range f.credentials {
		r.Header.Del(name)
	}
	if len(f.cfg.CredentialQuery) == 0 || r.URL == nil || r.URL.RawQuery == "" {
		return
	}
	q := r.URL.Query()
	for _, name := range f.cfg.CredentialQuery {
		q.Del(name)
	}
	r.URL.RawQuery = q.Encode()
	r.RequestURI = ""
}
