package webhookidempotency

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"golang.org/x/net/http/httpguts"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/inbox"
	"github.com/webhookguard/caddy-webhook-idempotency/providers"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("webhook_idempotency", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("webhook_idempotency", httpcaddyfile.Before, "reverse_proxy")
	httpcaddyfile.RegisterGlobalOption("webhook_idempotency", parseGlobalOption)
}

// parseCaddyfile sets up the handler from Caddyfile tokens. Across the
// Caddyfile's sites it also refuses two handlers that take the same source
// from a preset, naming both lines (Provision catches the rest of the
// config).
func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	// the dispenser was reset after the matcher lookahead: read the
	// directive's own position, then rewind for the parser
	h.Next()
	file, line := h.File(), h.Line()
	h.Reset()
	m := new(Handler)
	if err := m.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if m.Provider != "" && m.Source == "" {
		stateKey := "webhook_idempotency.preset_source." + m.Provider
		if prev, ok := h.State[stateKey].(string); ok {
			return nil, fmt.Errorf("%s:%d: %w", file, line, presetSourceConflict(m.Provider, "here and at "+prev))
		}
		h.State[stateKey] = fmt.Sprintf("%s:%d", file, line)
	}
	return m, nil
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens. Syntax:
//
//	webhook_idempotency [<matcher>] [<provider>] [<option> <value>]... {
//		source        <label>
//		provider      <name>
//		secret        <secret>...
//		public_key    <key>...
//		private_key   <pem>
//		jwks_url      <url>
//		jwks_file     <path>
//		decrypt
//		verify        <scheme> | off {
//			secret      <secret>...
//			header      <name>
//			algorithm   sha1|sha256|sha512
//			encoding    hex|base64
//			prefix      <string>
//			tolerance   <duration>
//			url         <public url>
//			public_key  <key>...
//			padding     pkcs1|pss
//			private_key <pem>
//			jwks_url    <url>
//			jwks_file   <path>
//		}
//		verify_token  <token>
//		handshake     on | off
//		header        <name>
//		key           <key source>...
//		ttl           <duration>
//		lease         <duration>
//		in_flight     conflict | wait [<timeout>] | proceed
//		cache_status  <code or class>...
//		mismatch      replay | reject
//		max_body      <size>
//		body_timeout  <duration>
//		max_response  <size>
//		keep_response <size> | 0
//		methods       <method>...
//		fail          open | closed
//		replay_guard  flag | reject | off
//		allow_ips     <provider> | <cidr>... | url <url> | file <path> {
//			refresh <duration>
//		}
//		client_cert   {
//			ca      <pem file>...
//			subject <pattern>...
//		}
//		store         file [<path>] {
//			sync always | <interval>
//		}
//		store         memory | redis [<redis url>] {
//			...
//		}
//		inbox         [<deliver_to>] {
//			...
//		}
//		archive       [<retention>] {
//			...
//		}
//	}
//
// Any option that takes one value may also be written as `<option> <value>`
// on the directive line.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	var keySet, headerSet bool
	// the last option read on the line, with its value, for the error of
	// a second value
	var last []string
	for first := true; d.NextArg(); first = false {
		name := d.Val()
		if inlineOptions[name] {
			var err error
			if name == "store" {
				h.StoreRaw, err = parseStore(d, true)
			} else if !d.NextArg() {
				return d.Errf("option '%s' on the directive line needs a value", name)
			} else if name == "verify" {
				err = h.parseVerify(d, []string{d.Val()}, true)
			} else if name == "archive" {
				err = h.parseArchive(d, true)
			} else {
				err = h.parseOption(d, name, []string{d.Val()}, &keySet, &headerSet)
			}
			if err != nil {
				return err
			}
			last = []string{name, d.Val()}
			continue
		}
		if _, ok := providers.Lookup(name); ok && first {
			h.Provider = name
			continue
		}
		if first {
			return d.Errf("unknown provider or option '%s'", name)
		}
		if last != nil && takesSeveral(last[0]) {
			return blockFormError(d, last)
		}
		return d.Errf("unknown option '%s' on the directive line", name)
	}
	// the block's `verify` token: one without a scheme needs a preset
	var verifyTok []caddyfile.Token
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name == "verify" {
			verifyTok = []caddyfile.Token{d.Token()}
		}
		if !blockOptions[name] {
			return d.Errf("unrecognized subdirective '%s'", name)
		}
		var err error
		switch name {
		case "store":
			h.StoreRaw, err = parseStore(d, false)
		case "verify":
			err = h.parseVerify(d, d.RemainingArgs(), false)
		case "reconcile":
			if h.Reconcile != nil {
				return d.Err("reconcile given twice")
			}
			h.Reconcile = new(ReconcileConfig)
			err = h.Reconcile.unmarshalCaddyfile(d)
		case "batch":
			if h.Batch != nil {
				return d.Err("batch given twice")
			}
			h.Batch = new(BatchConfig)
			err = h.Batch.unmarshalCaddyfile(d)
		case "forward":
			if h.Forward != nil {
				return d.Err("forward given twice")
			}
			h.Forward = new(ForwardConfig)
			err = h.Forward.unmarshalCaddyfile(d)
		case "inbox":
			if h.Inbox != nil {
				return d.Err("inbox given twice")
			}
			h.Inbox = new(InboxConfig)
			err = h.Inbox.unmarshalCaddyfile(d)
		case "archive":
			err = h.parseArchive(d, false)
		case "allow_ips":
			err = h.parseAllowIPs(d)
		case "client_cert":
			err = h.parseClientCert(d)
		default:
			err = h.parseOption(d, name, d.RemainingArgs(), &keySet, &headerSet)
		}
		if err != nil {
			return err
		}
		if (name == "inbox" || name == "store") && h.Inbox != nil && h.StoreRaw != nil {
			if s := storeModule(h.StoreRaw); s != nil {
				if err := inbox.Supports(s); err != nil {
					return d.Errf("%v", err)
				}
			}
		}
	}
	if verifyTok != nil && h.scheme() == "" {
		// without a preset, a bare `verify` would verify nothing
		vd := caddyfile.NewDispenser(verifyTok)
		vd.Next()
		return vd.Errf("'verify' needs a scheme (hmac, token, jwt, ed25519, rsa, a provider name, or off) unless the handler has a provider preset")
	}
	return nil
}

// lineOptions are the options of the handler that take their values on
// one line (parseOption), and how many each takes.
var lineOptions = map[string]cfparse.Arity{
	"source": cfparse.One, "provider": cfparse.One, "secret": cfparse.Some, "header": cfparse.One,
	"key": cfparse.Some, "ttl": cfparse.One, "lease": cfparse.One, "in_flight": cfparse.Some,
	"cache_status": cfparse.Some, "mismatch": cfparse.One, "max_body": cfparse.One, "body_timeout": cfparse.One,
	"max_response": cfparse.One, "keep_response": cfparse.One, "methods": cfparse.Some, "fail": cfparse.One, "public_key": cfparse.Some,
	"verify_token": cfparse.One, "handshake": cfparse.One, "private_key": cfparse.One, "jwks_url": cfparse.One,
	"jwks_file": cfparse.One, "decrypt": cfparse.None, "replay_guard": cfparse.One,
	"issuer": cfparse.Some, "audience": cfparse.Some, "claim": cfparse.Some,
}

// blockOptions are the subdirectives of the handler's block: the line
// options, store, verify, inbox, archive, allow_ips and client_cert.
var blockOptions = func() map[string]bool {
	m := map[string]bool{"store": true, "verify": true, "inbox": true, "archive": true, "allow_ips": true, "client_cert": true, "forward": true, "reconcile": true, "batch": true}
	for name := range lineOptions {
		m[name] = true
	}
	return m
}()

// inlineOptions are the options that may be given on the directive line:
// the line options that take a value, store, verify and archive.
var inlineOptions = func() map[string]bool {
	m := map[string]bool{"store": true, "verify": true, "archive": true}
	for name, a := range lineOptions {
		if a != cfparse.None {
			m[name] = true
		}
	}
	return m
}()

// takesSeveral reports whether an option may take more than one value
// (after its name, in the block form): the directive line holds one.
func takesSeveral(name string) bool {
	return lineOptions[name] == cfparse.Some || name == "store"
}

// blockFormError is the error of a second value given to an option on the
// directive line (`store redis redis://…`, `cache_status 2xx 5xx`): the
// token after the option's value, which is no option, is taken for another
// of its values, and the error shows the option written in the block form.
// The dispenser is on that token; last is the option and its value.
func blockFormError(d *caddyfile.Dispenser, last []string) error {
	extra := d.Val()
	line := append([]string(nil), last...)
	line = append(line, extra)
	for d.NextArg() && !inlineOptions[d.Val()] {
		line = append(line, d.Val())
	}
	return d.Errf("'%s' follows '%s %s' on the directive line, which holds one value per option: an option with several values needs the block form, webhook_idempotency … { %s }",
		extra, last[0], last[1], strings.Join(line, " "))
}

// parseOption applies one line option with its values.
func (h *Handler) parseOption(d *caddyfile.Dispenser, name string, args []string, keySet, headerSet *bool) error {
	v, err := lineOptions[name].Check(d, "'"+name+"'", args)
	if err != nil {
		return err
	}
	if err := h.setOption(name, v, args, keySet, headerSet); err != nil {
		return d.Errf("%v", err)
	}
	return nil
}

// setOption applies a line option whose values parseOption checked; v is
// the first of them.
func (h *Handler) setOption(name, v string, args []string, keySet, headerSet *bool) error {
	switch name {
	case "source":
		if err := checkSource(v); err != nil {
			return err
		}
		h.Source = v
	case "provider":
		if _, ok := providers.Lookup(v); !ok {
			return fmt.Errorf("unknown provider '%s'", v)
		}
		h.Provider = v
	case "secret", "public_key", "private_key", "jwks_url", "jwks_file", "decrypt", "issuer", "audience", "claim":
		return h.setVerifyOption(name, v, args)
	case "header":
		if *keySet {
			return errors.New("'header' and 'key' both set the key: use one")
		}
		if !httpguts.ValidHeaderFieldName(v) {
			return fmt.Errorf("invalid header '%s': not a valid header name", v)
		}
		*headerSet = true
		h.Key = []string{"header:" + v, "body"}
	case "key":
		if *headerSet {
			return errors.New("'header' and 'key' both set the key: use one")
		}
		if _, err := parseKeySources(args); err != nil {
			return err
		}
		*keySet = true
		h.Key = append(h.Key, args...)
	case "ttl", "lease", "body_timeout":
		dur, err := cfparse.PositiveDuration(name, v)
		if err != nil {
			return err
		}
		switch name {
		case "ttl":
			h.TTL = dur
		case "lease":
			h.Lease = dur
		default:
			h.BodyTimeout = dur
		}
	case "in_flight":
		mode, timeout, err := parseInFlight(args)
		if err != nil {
			return err
		}
		h.InFlight = mode.String()
		if timeout != 0 {
			h.WaitTimeout = timeout
		}
	case "cache_status":
		if _, err := parseStatusSet(args); err != nil {
			return err
		}
		h.CacheStatus = append(h.CacheStatus, args...)
	case "mismatch":
		if _, err := parseMismatch(v); err != nil {
			return err
		}
		h.Mismatch = v
	case "max_body", "max_response":
		size, err := parseSize(v)
		if err != nil {
			return fmt.Errorf("invalid %s '%s': %v", name, v, err)
		}
		if name == "max_body" {
			h.MaxBody = size
		} else {
			h.MaxResponse = size
		}
	case "keep_response":
		n, err := parseKeepResponse(v)
		if err != nil {
			return err
		}
		h.KeepResponse = &n
	case "methods":
		for _, m := range args {
			if !validMethod(m) {
				return fmt.Errorf("invalid method '%s'", m)
			}
			h.Methods = append(h.Methods, strings.ToUpper(m))
		}
	case "fail":
		if _, err := parseFail(v, false); err != nil {
			return err
		}
		h.Fail = v
	case "replay_guard":
		if _, err := parseReplayGuard(v); err != nil {
			return err
		}
		h.ReplayGuard = v
	case "verify_token", "handshake":
		return h.setHandshakeOption(name, v)
	}
	return nil
}

// parseArchive parses `archive [<retention>] { ... }`; inline, only the
// retention is given and there is no block.
func (h *Handler) parseArchive(d *caddyfile.Dispenser, inline bool) error {
	if h.Archive != nil {
		return d.Err("archive given twice")
	}
	h.Archive = new(ArchiveConfig)
	return h.Archive.unmarshalCaddyfile(d, inline)
}

// parseStore parses `store <module> [args] [{ ... }]` with the store
// module's own Caddyfile parser and returns the module's JSON. The
// dispenser is on the `store` token; inline, only the module name is given
// and there is no block.
func parseStore(d *caddyfile.Dispenser, inline bool) (json.RawMessage, error) {
	if !d.NextArg() {
		return nil, d.Errf("store needs a type: file, memory or redis")
	}
	name := d.Val()
	info, err := caddy.GetModule("http.webhook_idempotency.stores." + name)
	if err != nil {
		return nil, d.Errf("unknown store '%s': want file, memory or redis", name)
	}
	unm, ok := info.New().(caddyfile.Unmarshaler)
	if !ok {
		return nil, d.Errf("store '%s' cannot be configured from a Caddyfile", name)
	}
	segment := caddyfile.NewDispenser([]caddyfile.Token{d.Token()})
	if !inline {
		segment = d.NewFromNextSegment()
	}
	if err := unm.UnmarshalCaddyfile(segment); err != nil {
		return nil, err
	}
	return caddyconfig.JSONModuleObject(unm, "module", name, nil), nil
}

// Interface guards
var _ caddyfile.Unmarshaler = (*Handler)(nil)
