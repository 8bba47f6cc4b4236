package webhookidempotency

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

// Inbox mode (docs/inbox.md): the configuration of a handler's inbox, its
// Caddyfile block, and the inbox built from it (internal/inbox).

// InboxConfig turns the handler into an inbox: a verified, new delivery is
// stored (in the file store's file, or a Redis Stream) and answered at
// once; background workers deliver it to `deliver_to`, retry failures on a
// schedule and move events that cannot be delivered to the dead letters.
// It requires the file store (the default) or the redis store.
type InboxConfig struct {
	// The URL every event is delivered to, e.g.
	// `http://app:3000/webhooks/stripe`. Placeholders such as `{env.APP}`
	// are resolved at provision time. Required.
	DeliverTo string `json:"deliver_to,omitempty"`

	// The status that answers an accepted event (and its duplicates),
	// 200-299. Default: 202.
	Respond int `json:"respond,omitempty"`

	// The waits between attempts after the first, immediate one: one
	// retry per entry. Default: `30s 1m 5m 30m 2h 12h`.
	Retries []caddy.Duration `json:"retries,omitempty"`

	// How much each wait varies at random, as a percentage (`10%`, `0%`).
	// Default: `10%`.
	Jitter string `json:"jitter,omitempty"`

	// The bound of one delivery attempt; an attempt that takes longer is
	// retried. Default: 10s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// The number of deliveries in progress at once, per Caddy instance.
	// Default: 4.
	Concurrency int `json:"concurrency,omitempty"`

	// Key sources (`header:<Name>`, `json:<path>`, `query:<name>`), tried
	// in order, whose first value is an event's group, e.g.
	// `json:data.object.id`. The events of one group are delivered one at
	// a time, in the order they were accepted: while one waits for a
	// retry, the later ones wait too, and other groups go on. An event
	// with no group value is delivered unordered. Default: none (every
	// event unordered).
	OrderBy []string `json:"order_by,omitempty"`

	// The most deliveries to deliver_to per second, minute or hour, as
	// `<n>/<s|m|h>` (`10/s`, `600/m`): in total across every instance
	// sharing the redis store, per instance on the file store. Events
	// wait for their turn, none is dropped; a 429 without Retry-After
	// slows the source down for a while (docs/inbox.md#rate). Default: no
	// limit.
	Rate string `json:"rate,omitempty"`

	// TLS toward an https deliver_to: the CAs that sign the application's
	// certificate, a client certificate it requires (mutual TLS), and the
	// name its certificate holds. Certificates are read at provision,
	// where one that does not load is an error. Default: the system's
	// roots, no client certificate, deliver_to's host.
	TLS *InboxTLSConfig `json:"tls,omitempty"`

	// The number of Redis streams the source's inbox is spread over, each
	// under a hash tag of its own (`{<key_prefix>:<source>:<i>}`), so a
	// busy source spreads over the nodes of a Redis Cluster; a group
	// always goes to one. 1 to 64; the file store takes 1 only.
	// Default: 1.
	Partitions int `json:"partitions,omitempty"`

	// With respond_app, an event's first attempt is made as it is
	// accepted, and the provider gets the application's own 2xx answer
	// when it comes within respond_app_within of the request (recorded and
	// replayed to duplicates); otherwise `respond`, and the event goes on
	// as usual (docs/inbox.md#the-applications-answer). A
	// respond_app_within alone sets respond_app. Default: off; the
	// deadline defaults to the preset's provider's documented timeout less
	// a fifth (docs/providers.md).
	RespondApp bool `json:"respond_app,omitempty"`

	// How long respond_app waits for the application's answer before
	// answering `respond` (docs/inbox.md#the-applications-answer); given
	// alone, it sets respond_app. Default: the preset's provider's
	// documented timeout less a fifth (docs/providers.md).
	RespondAppWithin caddy.Duration `json:"respond_app_within,omitempty"`

	// Destinations besides deliver_to, each for the events that match its
	// rule: an event goes to every route it matches, each delivering it
	// with its own attempts, order, rate, breaker and dead letters; to
	// deliver_to when it matches none (docs/inbox.md#routes). Default:
	// none.
	Routes []InboxRouteConfig `json:"routes,omitempty"`

	// Rules, `<key source>=<glob>`, of events that are answered `respond`,
	// archived with the result `filtered` and never stored nor delivered.
	// Default: none.
	Drop []string `json:"drop,omitempty"`

	// A breaker on each destination: deliveries stop while it keeps
	// failing, and resume once a probe succeeds (docs/inbox.md#breaker).
	// Default: none.
	Breaker *InboxBreakerConfig `json:"breaker,omitempty"`

	// A key source whose value grows with each state of an object, such as
	// `json:updated_at` (a number, or an RFC 3339 time): with order_by, an
	// event whose value is lower than the largest its group has delivered
	// is not delivered (result `stale`, archived, counted). Default: none.
	NewerThan string `json:"newer_than,omitempty"`
}

// InboxTLSConfig is how the inbox connects to an https deliver_to.
type InboxTLSConfig struct {
	// PEM files of the CAs that sign the application's certificate.
	// Default: the system's roots.
	CA []string `json:"ca,omitempty"`

	// The PEM file of the client certificate presented to the
	// application. Default: none.
	ClientCert string `json:"client_cert,omitempty"`

	// The PEM file of client_cert's private key. Default: none.
	ClientKey string `json:"client_key,omitempty"`

	// The name the application's certificate must hold. Default:
	// deliver_to's host.
	ServerName string `json:"server_name,omitempty"`
}

// unmarshalCaddyfile parses `tls { ca <pem>...; client_cert <cert> <key>;
// server_name <name> }`; the dispenser is on `tls`.
func (tc *InboxTLSConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.Errf("inbox tls takes a block, not '%s'", d.Val())
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		args := d.RemainingArgs()
		switch name {
		case "ca":
			if err := cfparse.SomeValues(d, "inbox tls 'ca'", args); err != nil {
				return err
			}
			tc.CA = append(tc.CA, args...)
		case "client_cert":
			if len(args) != 2 {
				return d.Errf("inbox tls 'client_cert' takes a certificate file and a key file, got %d values", len(args))
			}
			tc.ClientCert, tc.ClientKey = args[0], args[1]
		case "server_name":
			v, err := cfparse.OneValue(d, "inbox tls 'server_name'", args)
			if err != nil {
				return err
			}
			tc.ServerName = v
		default:
			return d.Errf("unrecognized inbox tls subdirective '%s'", name)
		}
	}
	return nil
}

// tlsConfig reads the certificates of the inbox's TLS configuration.
func (tc *InboxTLSConfig) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{ServerName: tc.ServerName, MinVersion: tls.VersionTLS12}
	if len(tc.CA) > 0 {
		cfg.RootCAs = x509.NewCertPool()
		for _, path := range tc.CA {
			pem, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("inbox tls ca: %v", err)
			}
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("inbox tls ca %s: no PEM certificate in it", path)
			}
		}
	}
	if tc.ClientCert != "" || tc.ClientKey != "" {
		cert, err := tls.LoadX509KeyPair(tc.ClientCert, tc.ClientKey)
		if err != nil {
			return nil, fmt.Errorf("inbox tls client_cert: %v", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// Defaults of the inbox's options.
const (
	defaultInboxRespond     = http.StatusAccepted
	defaultInboxJitter      = "10%"
	defaultInboxTimeout     = 10 * time.Second
	defaultInboxConcurrency = 4
)

var defaultInboxRetries = []caddy.Duration{
	caddy.Duration(30 * time.Second), caddy.Duration(time.Minute), caddy.Duration(5 * time.Minute),
	caddy.Duration(30 * time.Minute), caddy.Duration(2 * time.Hour), caddy.Duration(12 * time.Hour),
}

// unmarshalCaddyfile parses the inbox block; the dispenser is on `inbox`:
//
//	inbox [<deliver_to>] {
//		deliver_to  <url>
//		respond     <status> | app [within <duration>]
//		retries     <duration>...
//		jitter      <percent>
//		timeout     <duration>
//		concurrency <n>
//		order_by    <key source>...
//		rate        <n>/<s|m|h>
//		partitions  <n>
//		tls {
//			ca          <pem file>...
//			client_cert <cert file> <key file>
//			server_name <name>
//		}
//		route      <key source>=<glob> <url> [{ retries …; rate …; order_by …; tls { … } }]
//		drop       <key source>=<glob>
//		breaker    <p>% of <n> [cooldown <duration>]
//		newer_than <key source>
//	}
func (ib *InboxConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	// made here, so that it names the line of `inbox`, not the end of its block
	errNoURL := d.Errf("%v", errNoDeliverTo)
	if args := d.RemainingArgs(); len(args) > 1 {
		return d.Errf("inbox takes one deliver_to URL, got extra argument '%s'", args[1])
	} else if len(args) == 1 {
		if err := ib.setDeliverTo(args[0]); err != nil {
			return d.Errf("%v", err)
		}
	}
	if err := ib.parseBlock(d); err != nil {
		return err
	}
	if ib.DeliverTo == "" {
		return errNoURL
	}
	return nil
}

// inboxOptions are the subdirectives of the inbox block and the values each
// takes; respond (a status, or `app …`), route and tls are read apart.
var inboxOptions = map[string]cfparse.Arity{
	"deliver_to": cfparse.One, "retries": cfparse.Some, "jitter": cfparse.One,
	"timeout": cfparse.One, "concurrency": cfparse.One,
	"order_by": cfparse.Some, "rate": cfparse.One, "partitions": cfparse.One,
	"drop": cfparse.One, "breaker": cfparse.Some, "newer_than": cfparse.One,
}

// parseBlock reads the inbox block: its line options, its tls block and
// its routes.
func (ib *InboxConfig) parseBlock(d *caddyfile.Dispenser) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name == "route" {
			if err := ib.parseRoute(d); err != nil {
				return err
			}
			continue
		}
		if name == "tls" {
			if ib.TLS != nil {
				return d.Err("inbox tls given twice")
			}
			ib.TLS = new(InboxTLSConfig)
			if err := ib.TLS.unmarshalCaddyfile(d); err != nil {
				return err
			}
			continue
		}
		args := d.RemainingArgs()
		if name == "respond" {
			if err := ib.parseRespond(d, args); err != nil {
				return err
			}
			continue
		}
		a, ok := inboxOptions[name]
		if !ok {
			return d.Errf("unrecognized inbox subdirective '%s'", name)
		}
		v, err := a.Check(d, "inbox '"+name+"'", args)
		if err != nil {
			return err
		}
		if err := ib.setOption(name, v, args); err != nil {
			return d.Errf("%v", err)
		}
	}
	return nil
}

// setOption applies a subdirective of the inbox block, its values checked
// by the parser (v is the first).
func (ib *InboxConfig) setOption(name, v string, args []string) (err error) {
	switch name {
	case "deliver_to":
		err = ib.setDeliverTo(v)
	case "retries":
		ib.Retries = ib.Retries[:0]
		for _, a := range args {
			dur, err := cfparse.PositiveDuration("inbox retry", a)
			if err != nil {
				return err
			}
			ib.Retries = append(ib.Retries, dur)
		}
	case "jitter":
		ib.Jitter = v
		_, err = parseJitter(v)
	case "timeout":
		ib.Timeout, err = cfparse.PositiveDuration("inbox timeout", v)
	case "concurrency":
		ib.Concurrency, err = checkConcurrency(v)
	case "order_by":
		ib.OrderBy = args
		_, err = parseOrderBy(args)
	case "rate":
		ib.Rate = v
		_, err = parseInboxRate(v)
	case "partitions":
		ib.Partitions, err = checkPartitions(v)
	case "drop":
		ib.Drop = append(ib.Drop, v)
		_, _, err = parseRule("drop", v)
	case "breaker":
		if ib.Breaker != nil {
			return fmt.Errorf("inbox breaker given twice")
		}
		ib.Breaker, err = parseBreaker(args)
	case "newer_than":
		ib.NewerThan = v
		_, err = parseNewerThan(v)
	}
	return err
}

// setDeliverTo sets deliver_to, given on the inbox line or in its block
// (once).
func (ib *InboxConfig) setDeliverTo(v string) error {
	if err := checkDeliverTo(v); err != nil {
		return err
	}
	if ib.DeliverTo != "" {
		return fmt.Errorf("inbox deliver_to given twice: '%s' and '%s'", ib.DeliverTo, v)
	}
	ib.DeliverTo = v
	return nil
}

// newInbox builds the inbox on the handler's store from its resolved
// configuration; workers start with the configuration (App.Start).
func (h *Handler) newInbox() (*inbox.Inbox, error) {
	ic, err := h.inboxConfig()
	if err != nil {
		return nil, err
	}
	if h.drops, err = dropRules(h.Inbox.Drop); err != nil {
		return nil, err
	}
	h.answerWithin = ic.AnswerWithin
	ib, err := inbox.New(ic, h.store.backend)
	if err == nil && h.archive != nil {
		// an archived inbox event shows the attempts its inbox keeps
		h.archive.ReadAttempts(ib.Attempts)
	}
	return ib, err
}

// inboxConfig resolves the inbox's configuration with the parser's rules:
// placeholders replaced, defaults applied, every value checked.
func (h *Handler) inboxConfig() (inbox.Config, error) {
	cfg := h.Inbox
	ic := inbox.Config{
		Source:      h.Source,
		DeliverTo:   caddy.NewReplacer().ReplaceKnown(cfg.DeliverTo, ""),
		Respond:     cfg.Respond,
		Timeout:     time.Duration(cfg.Timeout),
		Concurrency: cfg.Concurrency,
		TTL:         time.Duration(h.TTL),
		Namespace:   h.namespace(),
		Forward:     h.fwd.later,
		Series:      h.series,
		Logger:      h.logger,
	}
	if cfg.TLS != nil {
		var err error
		if ic.TLS, err = cfg.TLS.tlsConfig(); err != nil {
			return inbox.Config{}, err
		}
	}
	if ic.DeliverTo == "" {
		return inbox.Config{}, errNoDeliverTo
	}
	if err := checkDeliverTo(ic.DeliverTo); err != nil {
		return inbox.Config{}, err
	}
	if p, ok := providers.Lookup(h.Provider); ok && p.Success != nil && (ic.Respond == 0 || ic.Respond == p.Success.Status) {
		// the answer the provider expects (Adyen's [accepted])
		ic.Respond, ic.RespondBody, ic.RespondType = p.Success.Status, p.Success.Body, p.Success.ContentType
	}
	if ic.Respond == 0 {
		ic.Respond = defaultInboxRespond
	}
	if _, err := checkInboxRespond(strconv.Itoa(ic.Respond)); err != nil {
		return inbox.Config{}, err
	}
	retries := cfg.Retries
	if len(retries) == 0 {
		retries = defaultInboxRetries
	}
	for _, d := range retries {
		if err := checkPositive("retry", d); err != nil {
			return inbox.Config{}, err
		}
		ic.Retries = append(ic.Retries, time.Duration(d))
	}
	jitter := cfg.Jitter
	if jitter == "" {
		jitter = defaultInboxJitter
	}
	var err error
	if ic.Jitter, err = parseJitter(jitter); err != nil {
		return inbox.Config{}, err
	}
	// the admin API shows events redacted as the archive stores them
	var rules []string
	if h.Archive != nil {
		rules = h.Archive.Redact
	}
	if ic.Redact, err = h.redactor(rules); err != nil {
		return inbox.Config{}, err
	}
	if cfg.Timeout == 0 {
		ic.Timeout = defaultInboxTimeout
	} else if err := checkPositive("timeout", cfg.Timeout); err != nil {
		return inbox.Config{}, err
	}
	if ic.Concurrency == 0 {
		ic.Concurrency = defaultInboxConcurrency
	}
	if _, err := checkConcurrency(strconv.Itoa(ic.Concurrency)); err != nil {
		return inbox.Config{}, err
	}
	if len(cfg.OrderBy) > 0 {
		sources, err := parseOrderBy(cfg.OrderBy)
		if err != nil {
			return inbox.Config{}, err
		}
		ic.OrderBy, ic.GroupOf = cfg.OrderBy, groupResolver(sources)
	}
	if cfg.Rate != "" {
		if ic.Rate, err = parseInboxRate(cfg.Rate); err != nil {
			return inbox.Config{}, err
		}
	}
	ic.Partitions = 1
	if cfg.Partitions != 0 {
		if ic.Partitions, err = checkPartitions(strconv.Itoa(cfg.Partitions)); err != nil {
			return inbox.Config{}, err
		}
	}
	if err := h.policyConfig(&ic); err != nil {
		return inbox.Config{}, err
	}
	// an event's attempts, kept as long as the archive keeps events
	// (docs/inbox.md#attempts)
	ic.KeepResponse = h.keepResponse
	if h.archive != nil {
		ac := h.archive.Config()
		ic.AttemptsLife, ic.AttemptsMax = ac.Retention, ac.MaxEvents
	}
	return ic, nil
}
