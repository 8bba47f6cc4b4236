package providers

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/cfparse"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The Caddyfile of the verify block (docs/providers.md: Generic schemes):
//
//	verify <scheme> | off {
//		secret          <secret>...
//		public_key      <key>...
//		header          <name> [scheme <auth scheme>]
//		query           <name>                        (token, eventgrid)
//		algorithm       <algorithm> | <field> { <value> <algorithm>... }
//		encoding        hex | base64
//		prefix          <string>
//		padding         pkcs1 | pss
//		tolerance       <duration>
//		url             <public url>
//		private_key     <pem>                         (stone)
//		jwks_url        <url>                         (stone, jwt)
//		jwks_file       <path>                        (stone, jwt)
//		string          "<template>"                  (template)
//		signature       <from> [prefix <p>] [encoding hex|base64] [format der|raw] [separator <s>] [skip <n>] [sets <s>]
//		timestamp       <from> [unit s|ms|rfc3339] [separator <s>] [prefix <p>]
//		secret_encoding raw | hex | base64 | whsec | nfkd | html_specialchars ...
//		cert_url        <from> { hosts <regexp>...; paths <regexp>...; subjects <regexp>...; trust chain|origin; cache <duration> }
//		items           json:<path>
//		max_items       <n>
//		issuer          <iss>...                      (jwt)
//		audience        <aud>...
//		algorithms      <alg>...
//		claim           <name> <value>...
//		webhook_id      <id>                          (paypal, template)
//	}

// blockOptions are the subdirectives of the verify block that take their
// values on one line, and how many each takes; algorithm, header,
// signature, timestamp and cert_url have grammars of their own.
var blockOptions = map[string]cfparse.Arity{
	"secret": cfparse.Some, "public_key": cfparse.Some, "private_key": cfparse.One, "jwks_url": cfparse.One,
	"jwks_file": cfparse.One, "encoding": cfparse.One, "prefix": cfparse.One, "tolerance": cfparse.One,
	"url": cfparse.One, "padding": cfparse.One, "string": cfparse.One, "secret_encoding": cfparse.Some,
	"items": cfparse.One, "max_items": cfparse.One, "issuer": cfparse.Some, "audience": cfparse.Some,
	"algorithms": cfparse.Some, "claim": cfparse.Some, "webhook_id": cfparse.One, "query": cfparse.One,
}

// UnmarshalBlock reads the subdirectives of a verify block into cfg; the
// dispenser is on `verify` with its arguments read. scheme is the verify
// scheme as far as it is known (the block's, else the route's preset; ""
// while neither is given).
func (cfg *VerifyConfig) UnmarshalBlock(d *caddyfile.Dispenser, scheme string) error {
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		var err error
		switch name {
		case "algorithm":
			err = cfg.parseAlgorithm(d, scheme)
		case "header":
			err = cfg.parseHeader(d)
		case "signature":
			err = cfg.parseSignature(d)
		case "timestamp":
			err = cfg.parseTimestamp(d)
		case "cert_url":
			err = cfg.parseCertURL(d)
		default:
			a, ok := blockOptions[name]
			if !ok {
				return d.Errf("unrecognized verify subdirective '%s'", name)
			}
			args := d.RemainingArgs()
			v, cerr := a.Check(d, "verify '"+name+"'", args)
			if cerr != nil {
				return cerr
			}
			if err := cfg.SetOption(name, v, args, scheme); err != nil {
				return d.Errf("%v", err)
			}
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// SetOption applies an option of the verify block, or one of those a
// handler's block takes as well (secret, public_key, private_key,
// jwks_url, jwks_file, decrypt, issuer, audience, claim), its values
// checked by the parser (v is the first); scheme is as for
// UnmarshalBlock.
func (cfg *VerifyConfig) SetOption(name, v string, args []string, scheme string) (err error) {
	switch name {
	case "secret":
		cfg.Secrets = append(cfg.Secrets, args...)
	case "public_key":
		if scheme != "" && scheme != "off" {
			for i, k := range args {
				if err := CheckPublicKey(scheme, k); err != nil {
					return fmt.Errorf("invalid public_key %d for %s: %v", len(cfg.PublicKeys)+i+1, scheme, err)
				}
			}
		}
		cfg.PublicKeys = append(cfg.PublicKeys, args...)
	case "encoding":
		cfg.Encoding = v
		_, err = ParseEncoding(v)
	case "prefix":
		cfg.Prefix = v
	case "tolerance":
		cfg.Tolerance, err = cfparse.PositiveDuration("tolerance", v)
	case "url":
		cfg.URL = v
		err = cfparse.CheckHTTPURL("url", v)
	case "padding":
		cfg.Padding = v
		_, err = ParsePadding(v)
	case "private_key":
		cfg.PrivateKey = v
	case "jwks_url":
		cfg.JWKSURL = v
	case "jwks_file":
		cfg.JWKSFile = v
	case "decrypt":
		cfg.Decrypt = true
	case "string":
		cfg.String = v
	case "secret_encoding":
		cfg.SecretEncoding = strings.Join(args, " ")
		for _, w := range args {
			if _, err = secretEncodings.Parse("secret_encoding", w); err != nil {
				break
			}
		}
	case "items":
		cfg.Items = v
	case "max_items":
		cfg.MaxItems, err = strconv.Atoi(v)
		if err != nil || cfg.MaxItems <= 0 {
			err = fmt.Errorf("invalid max_items '%s': want a positive integer", v)
		}
	case "issuer":
		cfg.Issuers = append(cfg.Issuers, args...)
	case "audience":
		cfg.Audiences = append(cfg.Audiences, args...)
	case "algorithms":
		cfg.JWTAlgorithms = append(cfg.JWTAlgorithms, args...)
	case "claim":
		if len(args) < 2 {
			return fmt.Errorf("claim takes a name and at least one value, got %d values", len(args))
		}
		if cfg.Claims == nil {
			cfg.Claims = make(map[string][]string)
		}
		cfg.Claims[args[0]] = append(cfg.Claims[args[0]], args[1:]...)
	case "webhook_id":
		if err := checkWebhookID(scheme, v); err != nil {
			return err
		}
		cfg.WebhookID = v
	case "query":
		cfg.Query = v
	default:
		return fmt.Errorf("unrecognized verify option '%s'", name)
	}
	if err == nil && (sealedOptions[name] || name == "jwks_url" || name == "jwks_file") {
		err = CheckSchemeOptions(scheme, *cfg)
	}
	return err
}

// secretEncodings are the words of secret_encoding (several: a key of each
// secret under each encoding that decodes it).
var secretEncodings = cfparse.Keywords[string]{{Word: "raw", Value: "raw"}, {Word: "hex", Value: "hex"}, {Word: "base64", Value: "base64"},
	{Word: "whsec", Value: "whsec"}, {Word: "nfkd", Value: "nfkd"}, {Word: "html_specialchars", Value: "html_specialchars"}}

// parseAlgorithm reads `algorithm <name>` or `algorithm <field> { <value>
// <name>... }`: a template's algorithm, or the hash of hmac and rsa.
func (cfg *VerifyConfig) parseAlgorithm(d *caddyfile.Dispenser, scheme string) error {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("verify 'algorithm' takes exactly one value, got %d", len(args))
	}
	nesting := d.Nesting()
	if !d.NextBlock(nesting) {
		cfg.Algorithm = args[0]
		if scheme == "template" {
			if err := signature.CheckAlgorithm(args[0]); err != nil {
				return d.Errf("invalid algorithm: %v", err)
			}
			return nil
		}
		if _, err := HashFunc(args[0]); err != nil {
			return d.Errf("%v", err)
		}
		return nil
	}
	cfg.AlgorithmField, cfg.AlgorithmValues = args[0], make(map[string]string)
	for ok := true; ok; ok = d.NextBlock(nesting) {
		value := d.Val()
		rest := d.RemainingArgs()
		if len(rest) != 1 {
			return d.Errf("algorithm %s: '%s' takes one algorithm, got %d values", args[0], value, len(rest))
		}
		if err := signature.CheckAlgorithm(rest[0]); err != nil {
			return d.Errf("invalid algorithm: %v", err)
		}
		cfg.AlgorithmValues[value] = rest[0]
	}
	return nil
}

// parseHeader reads `header <name> [scheme <auth scheme>]`.
func (cfg *VerifyConfig) parseHeader(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 3 && args[1] == "scheme" {
		cfg.Header, cfg.AuthScheme = args[0], args[2]
		return nil
	}
	v, err := cfparse.OneValue(d, "verify 'header'", args)
	cfg.Header = v
	return err
}

// parseSignature reads `signature <from> [prefix <p>] [encoding hex|base64]
// [format der|raw] [separator <s>] [skip <n>] [sets <s>]`.
func (cfg *VerifyConfig) parseSignature(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 0 || len(args)%2 != 1 {
		return d.Err("verify 'signature' takes where it is (header:<name>, json:<path> or query:<name>) and optional `prefix`, `encoding`, `format`, `separator`, `skip` and `sets` values")
	}
	loc := &SignatureConfig{From: args[0]}
	for i := 1; i < len(args); i += 2 {
		switch v := args[i+1]; args[i] {
		case "prefix":
			loc.Prefix = v
		case "encoding":
			loc.Encoding = v
			if _, err := ParseEncoding(v); err != nil {
				return d.Errf("%v", err)
			}
		case "format":
			if v != "der" && v != "raw" {
				return d.Errf("invalid signature format '%s': want der or raw", v)
			}
			loc.Format = v
		case "separator":
			loc.Separator = v
		case "skip":
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return d.Errf("invalid signature skip '%s': want how many items are not signatures (0 or more)", v)
			}
			loc.Skip = n
		case "sets":
			loc.Sets = v
		default:
			return d.Errf("unrecognized signature option '%s': want prefix, encoding, format, separator, skip or sets", args[i])
		}
	}
	cfg.Signature = loc
	return nil
}

// parseTimestamp reads `timestamp <from> [unit s|ms|rfc3339] [separator
// <s>] [prefix <p>]`.
func (cfg *VerifyConfig) parseTimestamp(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 0 || len(args)%2 != 1 {
		return d.Err("verify 'timestamp' takes where it is (header:<name>, json:<path> or query:<name>) and optional `unit s|ms|rfc3339`, `separator` and `prefix` values")
	}
	ts := &TimestampConfig{From: args[0]}
	for i := 1; i < len(args); i += 2 {
		switch v := args[i+1]; args[i] {
		case "unit":
			if v != "s" && v != "ms" && v != "rfc3339" {
				return d.Errf("invalid timestamp unit '%s': want s, ms or rfc3339", v)
			}
			ts.Unit = v
		case "separator":
			ts.Separator = v
		case "prefix":
			ts.Prefix = v
		default:
			return d.Errf("unrecognized timestamp option '%s': want unit, separator or prefix", args[i])
		}
	}
	cfg.Timestamp = ts
	return nil
}

// parseCertURL reads `cert_url <from> { hosts <regexp>...; paths
// <regexp>...; subjects <regexp>...; trust chain|origin; cache <duration> }`.
func (cfg *VerifyConfig) parseCertURL(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) != 1 {
		return d.Errf("verify 'cert_url' takes where the URL is (header:<name> or json:<path>), got %d values", len(args))
	}
	c := &CertURLConfig{From: args[0]}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		vals := d.RemainingArgs()
		if len(vals) == 0 {
			return d.Errf("cert_url '%s' needs a value", name)
		}
		switch name {
		case "hosts":
			c.Hosts = append(c.Hosts, vals...)
		case "paths":
			c.Paths = append(c.Paths, vals...)
		case "subjects":
			c.Subjects = append(c.Subjects, vals...)
		case "trust":
			if len(vals) != 1 || (vals[0] != "chain" && vals[0] != "origin") {
				return d.Errf("cert_url trust takes chain or origin, got %q", vals)
			}
			c.Trust = vals[0]
		case "cache":
			dur, err := cfparse.PositiveDuration("cert_url cache", vals[0])
			if err != nil {
				return d.Errf("%v", err)
			}
			c.Cache = dur
		default:
			return d.Errf("unrecognized cert_url subdirective '%s'", name)
		}
	}
	if len(c.Hosts) == 0 {
		return d.Err("cert_url needs `hosts`: the anchored patterns of the hosts a certificate may be fetched from")
	}
	cfg.CertURL = c
	return nil
}

// checkWebhookID is the rule of `webhook_id` as it is read: an id (or a
// placeholder) without spaces, on a scheme whose string signs
// {webhook_id} (paypal, a template; scheme "" while it is not known).
func checkWebhookID(scheme, v string) error {
	if strings.IndexFunc(v, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }) >= 0 {
		return fmt.Errorf("invalid webhook_id %q: a webhook id holds no spaces (PayPal's, in the app's webhook settings)", v)
	}
	if p, ok := presets[scheme]; ok && !p.takes("webhook_id") {
		return fmt.Errorf("the %s preset takes no webhook_id: its signature covers no webhook id (paypal's does)", scheme)
	}
	return nil
}
