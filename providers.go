package webhookidempotency

import (
	"crypto"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// provider is a preset (README: Providers): a source name, a verification
// scheme and a stable default key. This table is the one place that knows
// providers.
type provider struct {
	// defaultKey is the key chain used when the handler sets none; it
	// always ends with body.
	defaultKey []string

	// verifier builds the provider's scheme from a config whose secrets
	// and url are resolved (a zero tolerance is the default).
	verifier func(cfg VerifyConfig) (signature.Verifier, error)

	// options are the verify subdirectives the scheme takes besides
	// `secret` and `tolerance`.
	options verifyOptions

	// volatile are headers the provider sets anew on every delivery
	// attempt (signatures over a timestamp): a key taken from one of
	// them never deduplicates a retry.
	volatile []string

	// ttl is the default ttl when the provider retries for longer than
	// the handler's default (docs/providers.md: retries); zero keeps it.
	ttl time.Duration

	// inFlight is the default in_flight mode; empty keeps the handler's.
	inFlight string

	// maxBody is the default max_body when the provider's deliveries are
	// known to be far smaller than the handler's default; zero keeps it.
	maxBody int64
	// keys is the key material the scheme verifies with (zero: secrets);
	// keysOptional, that the scheme works without any.
	keys         keyMaterial
	keysOptional bool

	// handshake is the provider's handshake, answered at the edge
	// (handshake.go); nil when it has none.
	handshake *handshake

	// signed are the key sources the signature covers besides the body:
	// `header:<Name>` (a delivery id signed with the body), or `query:*`
	// when the signed URL carries the query. A header or query key not
	// listed is claimed with the body's key (guard.go).
	signed []string

	// bodyUnsigned marks a scheme that signs no body (a shared token sent
	// as it is, or a signature over ids alone): no key of it is guarded.
	bodyUnsigned bool

	// redact are the credentials the provider puts in its bodies, as
	// `redact` rules the archive always applies (docs/providers.md:
	// Credentials in bodies).
	redact []string

	// addresses is where the provider publishes the addresses it sends
	// from, in a form that can be fetched (`allow_ips <provider>`,
	// allowips.go); nil when it publishes none (docs/providers.md:
	// Published addresses).
	addresses *publishedList

	// edge checks the route's allow_ips and client_cert against what the
	// provider needs (efi.go); nil for no rule.
	edge func(*Handler) error
}

// verifyOptions is a set of the optional verify subdirectives.
type verifyOptions uint8

const (
	optHeader verifyOptions = 1 << iota
	optPrefix
	optURL
	optKeyMaterial // private_key, jwks_url, jwks_file, decrypt (stone)
)

// providers maps each preset name to its preset.
var providers = map[string]provider{
	"stripe": {
		defaultKey: []string{"json:id", "body"},
		verifier:   withTolerance(signature.NewStripe),
		volatile:   []string{"Stripe-Signature"},
		ttl:        3 * day, // live mode retries for up to 3 days
		// a PaymentIntent's, SetupIntent's or Checkout Session's client secret
		redact:    []string{"json:data.object.client_secret"},
		addresses: &publishedList{url: "https://stripe.com/files/ips/ips_webhooks.json", field: "WEBHOOKS"},
	},
	"github": {
		defaultKey: []string{"header:X-GitHub-Delivery", "body"},
		verifier:   bodyHMAC("X-Hub-Signature-256", "sha256=", signature.Hex),
		// the meta API's hooks ranges
		addresses: &publishedList{url: "https://api.github.com/meta", field: "hooks"},
	},
	"shopify": {
		// webhooks send X-Shopify-*, Events deliveries shopify-* headers
		// (docs/providers.md: Shopify)
		defaultKey: []string{"header:X-Shopify-Event-Id", "header:X-Shopify-Webhook-Id", "header:shopify-webhook-id", "body"},
		verifier:   newShopifyVerifier,
	},
	"slack": {
		defaultKey: []string{"json:event_id", "body"},
		verifier:   withTolerance(signature.NewSlack),
		volatile:   []string{"X-Slack-Signature", "X-Slack-Request-Timestamp"},
		handshake:  &slackURLVerification,
		// the verification token of every Events API delivery
		redact: []string{"json:token"},
	},
	"standard": {
		defaultKey: []string{"header:webhook-id", "body"},
		verifier:   standardWebhooks("webhook-"),
		volatile:   []string{"webhook-signature", "webhook-timestamp"},
		keys:       standardKeys,
		signed:     []string{"header:webhook-id"},
	},
	"svix": {
		defaultKey: []string{"header:svix-id", "body"},
		verifier:   standardWebhooks("svix-"),
		volatile:   []string{"svix-signature", "svix-timestamp"},
		ttl:        28 * time.Hour, // 8 attempts over 27h35m
		keys:       standardKeys,
		signed:     []string{"header:svix-id"},
		// every region's addresses
		addresses: &publishedList{url: "https://docs.svix.com/webhook-ips.json"},
	},
	"whatsapp": {
		defaultKey: []string{"body"},
		verifier:   bodyHMAC("X-Hub-Signature-256", "sha256=", signature.Hex),
		ttl:        7 * day, // Meta retries for up to 7 days
		handshake:  &metaSubscription,
	},
	"ifood": {
		defaultKey: []string{"json:id", "body"},
		verifier:   bodyHMAC("X-IFood-Signature", "", signature.Hex),
	},
	"mercadopago": {
		defaultKey: []string{"json:id", "body"},
		verifier:   withTolerance(signature.NewMercadoPago),
		volatile:   []string{"x-signature", "x-request-id"},
		ttl:        4 * day, // the last retry comes 4 days after the first
		// the manifest signs data.id, x-request-id and ts, not the body
		bodyUnsigned: true,
	},
	"pagbank": {
		defaultKey: []string{"body"},
		verifier:   newPagBankVerifier,
	},
	"paddle": {
		defaultKey: []string{"json:notification_id", "body"},
		verifier:   withTolerance(signature.NewPaddle),
		volatile:   []string{"Paddle-Signature"},
		ttl:        3 * day, // live: up to 60 retries over 3 days
	},
	"twilio": {
		defaultKey: []string{"header:I-Twilio-Idempotency-Token", "body"},
		verifier:   withPublicURL(signature.NewTwilio),
		options:    optURL,
		signed:     []string{"query:*"},
	},
	"square": {
		defaultKey: []string{"json:event_id", "body"},
		verifier:   withPublicURL(signature.NewSquare),
		options:    optURL,
		ttl:        3 * day, // retried for up to 72 hours
		signed:     []string{"query:*"},
	},
	"gitlab": {
		defaultKey:   []string{"header:Idempotency-Key", "body"},
		verifier:     newGitLabVerifier,
		volatile:     []string{"webhook-signature", "webhook-timestamp"},
		bodyUnsigned: true,
	},
	"stone": {
		// built by provisionStone: its key set is fetched and shared
		defaultKey: []string{"header:x-stone-webhook-event-id", "body"},
		options:    optKeyMaterial,
		ttl:        2 * day, // 50 attempts over the day, at no fixed times
		// the JWS signs the event (the body key's bytes) but not the
		// event id header: that key is guarded
		// an event is one resource's JSON, a few KB, wrapped in a JWS
		// and a JWE (about 1.8 times its size): 1MiB holds events of
		// 550 KB, and bounds what a forged delivery (anyone can encrypt
		// to the partner's key) costs to decrypt (docs/providers.md:
		// Stone)
		maxBody: 1 << 20,
	},
	"evolution": {
		defaultKey: []string{"body"},
		verifier:   newEvolutionVerifier,
		options:    optHeader | optPrefix,
		// a token, or a JWT over claims alone: no body is signed
		bodyUnsigned: true,
		// the instance's API key, in every delivery
		redact: []string{"json:apikey"},
	},
	"asaas": {
		defaultKey: []string{"json:id", "body"},
		verifier:   fixedToken("asaas-access-token"),
		inFlight:   "wait", // Asaas counts a 409 as one of the 15 failures that pause its queue
		// a shared token: no body is signed
		bodyUnsigned: true,
	},
	"discord": {
		defaultKey: []string{"json:id", "body"},
		verifier:   newDiscordVerifier,
		volatile:   []string{"X-Signature-Ed25519", "X-Signature-Timestamp"},
		keys:       ed25519Keys,
		handshake:  &discordPing,
		// an interaction's token, which answers it for 15 minutes
		redact: []string{"json:token"},
	},
	"twitch": {
		defaultKey: []string{"header:Twitch-Eventsub-Message-Id", "body"},
		verifier:   withTolerance(signature.NewTwitch),
		volatile:   []string{"Twitch-Eventsub-Message-Signature", "Twitch-Eventsub-Message-Timestamp"},
		handshake:  &twitchCallbackVerification,
		// the HMAC covers the message id, the timestamp and the body
		signed: []string{"header:Twitch-Eventsub-Message-Id"},
	},
	"zoom": {
		defaultKey: []string{"body"},
		verifier:   withTolerance(signature.NewZoom),
		volatile:   []string{"x-zm-signature", "x-zm-request-timestamp"},
		handshake:  &zoomURLValidation,
		// recording.completed's download_token, valid for 24 hours
		redact: []string{"json:download_token"},
	},
	"linear": {
		defaultKey: []string{"header:Linear-Delivery", "body"},
		verifier:   withTolerance(signature.NewLinear),
		// Linear-Delivery is outside the body's HMAC: that key is guarded
		addresses: &publishedList{url: "https://linear.app/.well-known/appspecific/app.linear.ips.json", field: "ips"},
	},
	"razorpay": {
		defaultKey: []string{"header:x-razorpay-event-id", "body"},
		verifier:   bodyHMAC("X-Razorpay-Signature", "", signature.Hex),
		// x-razorpay-event-id is outside the body's HMAC: that key is
		// guarded
	},
	"woovi": {
		defaultKey:   []string{"body"},
		verifier:     newWooviVerifier,
		keys:         rsaKeys,
		keysOptional: true,
	},
	"efi": {
		// Pix callbacks carry no id of their own: a callback is a batch
		// (`pix` is an array), and a refund's callback repeats the
		// endToEndId of the Pix it refunds (docs/providers.md: Efí)
		defaultKey: []string{"body"},
		verifier:   newEfiVerifier,
		// the client certificate authenticates the delivery; a secret is
		// the hmac token of Efí's fallback without mutual TLS
		keysOptional: true,
		ttl:          4 * day, // 10 retries, the last about 85 hours after the first failure
		bodyUnsigned: true,
		edge:         efiEdge,
	},
	"hubspot": {
		defaultKey: []string{"body"},
		verifier:   newHubSpotVerifier,
		options:    optURL,
		volatile:   []string{"X-HubSpot-Signature-v3", "X-HubSpot-Request-Timestamp"},
		// v3 signs the method, the URL with its query, the body and the
		// timestamp
		signed: []string{"query:*"},
	},
}

// day is 24 hours.
const day = 24 * time.Hour

// checkOptions rejects verify subdirectives the preset's scheme has no
// use for, rather than silently ignoring them.
func (p provider) checkOptions(cfg VerifyConfig) error {
	var bad []string
	for _, name := range cfg.optionsSet() {
		if !p.takes(name) {
			bad = append(bad, name)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("the preset takes no %s (the generic hmac, token, jwt, ed25519 and rsa schemes do)", strings.Join(bad, ", "))
	}
	return nil
}

// takes reports whether the preset's scheme takes a verify subdirective
// of optionsSet.
func (p provider) takes(option string) bool {
	switch {
	case option == "header":
		return p.options&optHeader != 0
	case option == "prefix":
		return p.options&optPrefix != 0
	case option == "url":
		return p.options&optURL != 0
	case stoneOptions[option]:
		return p.options&optKeyMaterial != 0
	case option == "public_key":
		return p.keys != secretKeys
	}
	return false
}

// optionsSet names the verify subdirectives a config sets, besides
// secret and tolerance, in the order errors name them.
func (cfg VerifyConfig) optionsSet() []string {
	var set []string
	for _, o := range [...]struct {
		name string
		set  bool
	}{
		{"header", cfg.Header != ""},
		{"prefix", cfg.Prefix != ""},
		{"url", cfg.URL != ""},
		{"private_key", cfg.PrivateKey != ""},
		{"jwks_url", cfg.JWKSURL != ""},
		{"jwks_file", cfg.JWKSFile != ""},
		{"decrypt", cfg.Decrypt},
		{"public_key", len(cfg.PublicKeys) > 0},
		{"padding", cfg.Padding != ""},
		{"algorithm", cfg.Algorithm != ""},
		{"encoding", cfg.Encoding != ""},
	} {
		if o.set {
			set = append(set, o.name)
		}
	}
	return set
}

// bodyHMAC is the scheme of providers that sign the raw body alone with
// an HMAC-SHA256 in one header.
func bodyHMAC(header, prefix string, enc signature.Encoding) func(VerifyConfig) (signature.Verifier, error) {
	return func(cfg VerifyConfig) (signature.Verifier, error) {
		return signature.NewHMAC(header, prefix, crypto.SHA256, enc, cfg.Secrets)
	}
}

// withTolerance adapts the constructor of a scheme that signs a timestamp.
func withTolerance(newScheme func([]string, time.Duration) signature.Verifier) func(VerifyConfig) (signature.Verifier, error) {
	return func(cfg VerifyConfig) (signature.Verifier, error) {
		return newScheme(cfg.Secrets, time.Duration(cfg.Tolerance)), nil
	}
}

// withPublicURL adapts the constructor of a scheme that signs the public
// URL.
func withPublicURL(newScheme func([]string, signature.PublicURL) signature.Verifier) func(VerifyConfig) (signature.Verifier, error) {
	return func(cfg VerifyConfig) (signature.Verifier, error) {
		return newScheme(cfg.Secrets, cfg.publicURL()), nil
	}
}

// standardWebhooks is the Standard Webhooks scheme for headers named with
// prefix; public keys join the secrets as `whpk_` keys.
func standardWebhooks(prefix string) func(VerifyConfig) (signature.Verifier, error) {
	return func(cfg VerifyConfig) (signature.Verifier, error) {
		public, err := whpkKeys(cfg.PublicKeys)
		if err != nil {
			return nil, err
		}
		secrets := append(slices.Clip(cfg.Secrets), public...)
		return signature.NewStandardWebhooks(prefix, secrets, time.Duration(cfg.Tolerance))
	}
}

// newDiscordVerifier builds the `discord` scheme.
func newDiscordVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	keys, err := parseEd25519Keys(cfg.PublicKeys)
	if err != nil {
		return nil, err
	}
	return signature.NewDiscord(keys, time.Duration(cfg.Tolerance))
}

// newShopifyVerifier builds the `shopify` scheme.
func newShopifyVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	return signature.NewShopify(cfg.Secrets), nil
}

// newWooviVerifier builds the `woovi` scheme: with no public_key, Woovi's
// published key.
func newWooviVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	keys, err := parseRSAKeys(cfg.PublicKeys)
	if err != nil {
		return nil, err
	}
	return signature.NewWoovi(keys)
}

// newHubSpotVerifier builds the `hubspot` scheme, which signs the public
// URL and a timestamp.
func newHubSpotVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	return signature.NewHubSpot(cfg.Secrets, cfg.publicURL(), time.Duration(cfg.Tolerance)), nil
}

// newGitLabVerifier builds the `gitlab` scheme.
func newGitLabVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	return signature.NewGitLab(cfg.Secrets, time.Duration(cfg.Tolerance))
}

// newPagBankVerifier builds the `pagbank` scheme.
func newPagBankVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	return signature.NewPagBank(cfg.Secrets), nil
}

// newEvolutionVerifier builds the `evolution` scheme: with a header, the
// token Evolution's instance sends in it (its webhook headers); without,
// the JWT Evolution sends in Authorization when the headers hold a
// jwt_key (docs/providers.md: Evolution API).
func newEvolutionVerifier(cfg VerifyConfig) (signature.Verifier, error) {
	if cfg.Header != "" {
		return newTokenVerifier(cfg)
	}
	return newJWTVerifier(cfg)
}

// fixedToken is the scheme of providers that send a configured token,
// as it is, in one header.
func fixedToken(header string) func(VerifyConfig) (signature.Verifier, error) {
	return func(cfg VerifyConfig) (signature.Verifier, error) {
		return signature.NewToken(header, "", cfg.Secrets)
	}
}

// scheme is the name of the handler's verification scheme: its `verify`
// scheme, else its preset's.
func (h *Handler) scheme() string {
	if h.Verify != nil && h.Verify.Scheme != "" {
		return h.Verify.Scheme
	}
	return h.Provider
}

// warnVerifyConfig logs, at provision, configurations that work but will
// not do what their author most likely wants. It never rejects them.
func (h *Handler) warnVerifyConfig() {
	scheme := h.scheme()
	for _, k := range h.Key {
		name, ok := strings.CutPrefix(k, "header:")
		if !ok {
			continue
		}
		if preset, volatile := volatileHeader(name, scheme); volatile {
			h.logger.Warn("the key header changes on every delivery attempt (the provider signs each attempt with a new timestamp), so retries will not be deduplicated; key on the provider's stable event id instead",
				zap.String("header", name),
				zap.String("provider", preset),
				zap.Strings("use_instead", providers[preset].defaultKey))
		}
	}
}

// volatileHeader reports whether a header changes on every delivery
// attempt of some provider, and which: prefer, when it lists the header,
// else the first such provider by name.
func volatileHeader(name, prefer string) (string, bool) {
	for _, v := range providers[prefer].volatile {
		if strings.EqualFold(v, name) {
			return prefer, true
		}
	}
	found := ""
	for preset, p := range providers {
		for _, v := range p.volatile {
			if strings.EqualFold(v, name) && (found == "" || preset < found) {
				found = preset
			}
		}
	}
	return found, found != ""
}
