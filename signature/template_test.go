package signature_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"hash"
	"hash/crc32"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/sigtest"
	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
	"github.com/webhookguard/caddy-webhook-idempotency/signature"
)

// The template scheme is checked against signatures made here with the
// standard library over strings written out by hand, not by the
// package's own template code or signers.

// templateNow is the clock of the template tests.
var templateNow = time.Unix(1767225600, 0)

// ecdsaKey is a P-256 key a name stands for, generated on first use.
var ecdsaKeys sync.Map

func ecdsaKey(name string) *ecdsa.PrivateKey {
	if k, ok := ecdsaKeys.Load(name); ok {
		return k.(*ecdsa.PrivateKey)
	}
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	actual, _ := ecdsaKeys.LoadOrStore(name, k)
	return actual.(*ecdsa.PrivateKey)
}

// algCase signs with one algorithm under the key a name stands for.
type algCase struct {
	alg    string
	keys   func(cfg *signature.TemplateConfig, name string) // the verifier's keys
	sign   func(name string, msg []byte) []byte
	format string
}

func hmacCase(alg string, h func() hash.Hash) algCase {
	return algCase{
		alg:  alg,
		keys: func(cfg *signature.TemplateConfig, name string) { cfg.Secrets = []string{"secret-" + name} },
		sign: func(name string, msg []byte) []byte {
			m := hmac.New(h, []byte("secret-"+name))
			m.Write(msg)
			return m.Sum(nil)
		},
	}
}

func rsaCase(alg string, h crypto.Hash, pss bool) algCase {
	return algCase{
		alg: alg,
		keys: func(cfg *signature.TemplateConfig, name string) {
			cfg.PublicKeys = []string{sigtest.PEMPublic(&sigtest.RSAKey(name).PublicKey)}
		},
		sign: func(name string, msg []byte) []byte { return sigtest.RSASign(sigtest.RSAKey(name), h, pss, msg) },
	}
}

func ecdsaCase(raw bool) algCase {
	c := algCase{
		alg: signature.ECDSAP256SHA256,
		keys: func(cfg *signature.TemplateConfig, name string) {
			cfg.PublicKeys = []string{sigtest.PEMPublic(&ecdsaKey(name).PublicKey)}
		},
		sign: func(name string, msg []byte) []byte {
			d := sha256.Sum256(msg)
			if !raw {
				sig, err := ecdsa.SignASN1(rand.Reader, ecdsaKey(name), d[:])
				if err != nil {
					panic(err)
				}
				return sig
			}
			r, s, err := ecdsa.Sign(rand.Reader, ecdsaKey(name), d[:])
			if err != nil {
				panic(err)
			}
			out := make([]byte, 64)
			r.FillBytes(out[:32])
			s.FillBytes(out[32:])
			return out
		},
	}
	if raw {
		c.format = "raw"
	}
	return c
}

var templateAlgorithms = []algCase{
	hmacCase(signature.HMACSHA1, sha1.New),
	hmacCase(signature.HMACSHA256, sha256.New),
	hmacCase(signature.HMACSHA512, sha512.New),
	{
		alg: signature.Ed25519,
		keys: func(cfg *signature.TemplateConfig, name string) {
			cfg.PublicKeys = []string{sigtest.PEMPublic(sigtest.Ed25519Public(name))}
		},
		sign: func(name string, msg []byte) []byte { return ed25519.Sign(sigtest.Ed25519Key(name), msg) },
	},
	ecdsaCase(false),
	ecdsaCase(true),
	rsaCase(signature.RSASHA1, crypto.SHA1, false),
	rsaCase(signature.RSASHA256, crypto.SHA256, false),
	rsaCase(signature.RSAPSSSHA256, crypto.SHA256, true),
}

func (c algCase) label() string {
	if c.format != "" {
		return c.alg + "-" + c.format
	}
	return c.alg
}

// templateLocation is where a signature goes, with a template that
// suits it.
type templateLocation struct {
	name   string
	from   string
	prefix string
	tmpl   string
	// message is what the template makes of a delivery
	message func(ts, eventID string, body []byte) []byte
	// deliver puts the encoded signature in a delivery of eventID
	deliver func(t *testing.T, ts, eventID, sig string) *sigtest.Delivery
}

func eventBody(eventID, extra string) []byte {
	return []byte(`{"event":{"id":"` + eventID + `","amount":1000}` + extra + `}`)
}

var templateLocations = []templateLocation{
	{
		name: "header", from: "header:X-Sig", prefix: "v1=",
		tmpl:    `{method}:{header.X-Timestamp}:{json.event.id}:{body}`,
		message: func(ts, id string, body []byte) []byte { return append([]byte("POST:"+ts+":"+id+":"), body...) },
		deliver: func(t *testing.T, ts, id, sig string) *sigtest.Delivery {
			d := sigtest.NewDelivery("/hooks", eventBody(id, ""), time.Time{})
			d.Req.Header.Set("X-Timestamp", ts)
			d.Req.Header.Set("X-Sig", "v1="+sig)
			return d
		},
	},
	{
		name: "query", from: "query:sig",
		tmpl:    `{method}:{header.X-Timestamp}:{json.event.id}:{body}`,
		message: func(ts, id string, body []byte) []byte { return append([]byte("POST:"+ts+":"+id+":"), body...) },
		deliver: func(t *testing.T, ts, id, sig string) *sigtest.Delivery {
			d := sigtest.NewDelivery("/hooks?sig="+url.QueryEscape(sig), eventBody(id, ""), time.Time{})
			d.Req.Header.Set("X-Timestamp", ts)
			return d
		},
	},
	{
		name: "json", from: "json:meta.sig",
		tmpl:    `{method}:{header.X-Timestamp}:{json.event.id}:{json.event.amount}`,
		message: func(ts, id string, _ []byte) []byte { return []byte("POST:" + ts + ":" + id + ":1000") },
		deliver: func(t *testing.T, ts, id, sig string) *sigtest.Delivery {
			d := sigtest.NewDelivery("/hooks", eventBody(id, `,"meta":{"sig":"`+sig+`"}`), time.Time{})
			d.Req.Header.Set("X-Timestamp", ts)
			return d
		},
	},
}

// TestTemplateAlgorithmsAndLocations checks every algorithm with the
// signature in a header, the query and the body: accepted when signed
// with the right key over the right string; refused with the right reason
// for a wrong key, one changed byte, a stale timestamp, and a missing
// signature or timestamp.
func TestTemplateAlgorithmsAndLocations(t *testing.T) {
	signature.SetClock(t, templateNow)
	ts := strconv.FormatInt(templateNow.Unix(), 10)
	for _, a := range templateAlgorithms {
		for _, enc := range []string{"hex", "base64"} {
			for _, loc := range templateLocations {
				t.Run(a.label()+"/"+enc+"/"+loc.name, func(t *testing.T) {
					cfg := signature.TemplateConfig{
						String:    loc.tmpl,
						Algorithm: a.alg,
						Signature: signature.SignatureLocation{From: loc.from, Prefix: loc.prefix, Encoding: enc, Format: a.format},
						Timestamp: signature.TimestampLocation{From: "header:X-Timestamp"},
					}
					a.keys(&cfg, "right")
					v, err := signature.NewTemplate(cfg)
					if err != nil {
						t.Fatal(err)
					}
					encode := func(b []byte) string {
						if enc == "hex" {
							return hex.EncodeToString(b)
						}
						return base64.StdEncoding.EncodeToString(b)
					}
					signed := func(ts, id, key string) *sigtest.Delivery {
						body := eventBody(id, "")
						return loc.deliver(t, ts, id, encode(a.sign(key, loc.message(ts, id, body))))
					}

					d := signed(ts, "evt_1", "right")
					sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)

					d = signed(ts, "evt_1", "wrong")
					sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)

					// one changed byte of a signed field
					d = signed(ts, "evt_1", "right")
					d.Body = []byte(strings.Replace(string(d.Body), "evt_1", "evt_2", 1))
					sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)

					stale := strconv.FormatInt(templateNow.Add(-signature.DefaultTolerance-time.Second).Unix(), 10)
					d = signed(stale, "evt_1", "right")
					sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrTimestamp)

					d = signed(ts, "evt_1", "right")
					d.Req.Header.Del("X-Timestamp")
					sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)

					d = loc.deliver(t, ts, "evt_1", "")
					d.Req.Header.Del("X-Sig")
					d.Req.URL.RawQuery = ""
					if loc.name == "json" {
						d.Body = eventBody("evt_1", "")
					}
					sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrMissing)
				})
			}
		}
	}
}

// signHMAC is the HMAC-SHA256 of msg under key, in hex.
func signHMAC(key, msg string) string {
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte(msg))
	return hex.EncodeToString(m.Sum(nil))
}

// hmacTemplate returns a template verifier with an HMAC-SHA256 hex
// signature in X-Sig and the secret "k".
func hmacTemplate(t *testing.T, tmpl string, edit ...func(*signature.TemplateConfig)) signature.Verifier {
	t.Helper()
	cfg := signature.TemplateConfig{
		String: tmpl, Algorithm: signature.HMACSHA256, Secrets: []string{"k"},
		Signature: signature.SignatureLocation{From: "header:X-Sig"},
	}
	for _, e := range edit {
		e(&cfg)
	}
	v, err := signature.NewTemplate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestTemplateFields checks what each field puts in the string: the
// public URL, the method, a header, a decoded query parameter, a JSON
// string decoded and a number as written, the body's CRC-32 in decimal
// and its SHA-256 in hex, and the escapes of the template's text.
func TestTemplateFields(t *testing.T) {
	body := []byte(`{"a":{"s":"line\nnext \"q\" \u00e9\ud83d\ude00 \/","n":-1.5e3,"b":true,"o":{"x":1}}}`)
	publicURL := func(dst []byte, r *http.Request) []byte {
		return append(append(dst, "https://hooks.example.com"...), r.URL.RequestURI()...)
	}
	v := hmacTemplate(t, `{url}|{method}|{header.X-One}|{query.q}|{json.a.s}|{json.a.n}|{json.a.b}|{json.a.o}|{body.crc32}|{body.sha256}|\t\\\{\}\[\]\r`,
		func(c *signature.TemplateConfig) { c.PublicURL = publicURL })
	sum := sha256.Sum256(body)
	want := "https://hooks.example.com/in?q=a%20b%2Bc|POST|one|a b+c|line\nnext \"q\" é😀 /|-1.5e3|true|{\"x\":1}|" +
		strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10) + "|" + hex.EncodeToString(sum[:]) + "|\t\\{}[]\r"
	d := sigtest.NewDelivery("/in?q=a%20b%2Bc", body, time.Time{})
	d.Req.Header.Set("X-One", "one")
	d.Req.Header.Set("X-Sig", signHMAC("k", want))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)

	d.Req.Header.Set("X-Sig", signHMAC("k", want+"x"))
	sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
}

// TestTemplateOptionalParts checks the optional part in brackets: left
// out, text and all, when a field in it is absent or null; kept when the
// field is there, even empty. Outside brackets an absent field is empty.
func TestTemplateOptionalParts(t *testing.T) {
	// Amazon SNS's notification string, Subject only when there is one
	v := hmacTemplate(t, `Message\n{json.Message}\nMessageId\n{json.MessageId}\n[Subject\n{json.Subject}\n]Type\n{json.Type}\n[H\n{header.X-Opt}\n]Q{query.absent}Q`)
	cases := []struct {
		name, body, header, signed string
	}{
		{"present", `{"Message":"m","MessageId":"1","Subject":"s","Type":"Notification"}`, "h",
			"Message\nm\nMessageId\n1\nSubject\ns\nType\nNotification\nH\nh\nQQ"},
		{"absent", `{"Message":"m","MessageId":"1","Type":"Notification"}`, "",
			"Message\nm\nMessageId\n1\nType\nNotification\nQQ"},
		{"null", `{"Message":"m","MessageId":"1","Subject":null,"Type":"Notification"}`, "",
			"Message\nm\nMessageId\n1\nType\nNotification\nQQ"},
		{"empty is present", `{"Message":"m","MessageId":"1","Subject":"","Type":"Notification"}`, "",
			"Message\nm\nMessageId\n1\nSubject\n\nType\nNotification\nQQ"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := sigtest.NewDelivery("/sns", []byte(c.body), time.Time{})
			if c.header != "" {
				d.Req.Header.Set("X-Opt", c.header)
			}
			d.Req.Header.Set("X-Sig", signHMAC("k", c.signed))
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
			// the string with the part the other way is refused
			other := strings.Replace(c.signed, "Type\n", "Subject\n\nType\n", 1)
			if before, after, ok := strings.Cut(c.signed, "Subject\n"); ok {
				_, rest, _ := strings.Cut(after, "\n")
				other = before + rest
			}
			d.Req.Header.Set("X-Sig", signHMAC("k", other))
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
		})
	}
}

// TestTemplateAmbiguousJSON checks that a JSON member the signature
// depends on, given twice or in another case, makes the delivery
// ambiguous: a reader taking the last (Go, JavaScript, PHP) and one
// taking the first would disagree on what was signed.
func TestTemplateAmbiguousJSON(t *testing.T) {
	v := hmacTemplate(t, `{json.Message}:{json.meta.id}`)
	signed := signHMAC("k", "m:1")
	for _, c := range []struct {
		name, body string
		want       *signature.Error
	}{
		{"once", `{"Message":"m","meta":{"id":"1"},"other":{"Message":"x","Message":"y"}}`, nil},
		{"twice", `{"Message":"m","meta":{"id":"1"},"Message":"forged"}`, signature.ErrAmbiguous},
		{"nested twice", `{"Message":"m","meta":{"id":"1","id":"2"}}`, signature.ErrAmbiguous},
		{"object twice", `{"meta":{"id":"1"},"Message":"m","meta":{"id":"2"}}`, signature.ErrAmbiguous},
		{"another case", `{"Message":"m","meta":{"id":"1"},"message":"forged"}`, signature.ErrAmbiguous},
		{"escaped name", `{"Message":"m","meta":{"id":"1"},"Mess\u0061ge":"forged"}`, signature.ErrAmbiguous},
		{"trailing document", `{"Message":"m","meta":{"id":"1"}} {"Message":"x"}`, signature.ErrInvalid},
		{"not JSON", `Message=m`, signature.ErrInvalid},
		{"bad literal", `{"Message":"m","meta":{"id":tru}}`, signature.ErrInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := sigtest.NewDelivery("/", []byte(c.body), time.Time{})
			d.Req.Header.Set("X-Sig", signed)
			sigtest.WantReason(t, v.Verify(d.Req, d.Body), c.want)
		})
	}
}

// TestTemplateSeveralSignatures checks rotation both ways: several
// secrets, and several signatures in one value (a separator) or in a
// repeated header.
func TestTemplateSeveralSignatures(t *testing.T) {
	v := hmacTemplate(t, `{header.Id}.{body}`, func(c *signature.TemplateConfig) {
		c.Secrets = []string{"old", "new"}
		c.Signature = signature.SignatureLocation{From: "header:Sigs", Prefix: "v1,", Separator: " ", Encoding: "base64"}
	})
	sig := func(key string) string {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte("msg_1.{}"))
		return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
	}
	check := func(want *signature.Error, values ...string) {
		t.Helper()
		d := sigtest.NewDelivery("/", []byte("{}"), time.Time{})
		d.Req.Header.Set("Id", "msg_1")
		for _, val := range values {
			d.Req.Header.Add("Sigs", val)
		}
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
	}
	check(nil, sig("new"))
	check(nil, sig("old"))
	check(nil, sig("other")+" "+sig("new"))
	check(nil, "v2,abc "+sig("old"))
	check(nil, sig("other"), sig("new"))
	check(signature.ErrInvalid, sig("other")+" "+sig("another"))
	check(signature.ErrInvalid, strings.TrimPrefix(sig("new"), "v1,"))
	check(signature.ErrMissing, " ")
}

// TestTemplateAlgorithmByField checks an algorithm chosen by a field, as
// Amazon SNS's SignatureVersion chooses: any other value, or none, is
// refused.
func TestTemplateAlgorithmByField(t *testing.T) {
	key := sigtest.RSAKey("sns")
	v, err := signature.NewTemplate(signature.TemplateConfig{
		String:          `{json.Message}`,
		AlgorithmField:  "json:SignatureVersion",
		AlgorithmValues: map[string]string{"1": "rsa-sha1", "2": "rsa-sha256"},
		Signature:       signature.SignatureLocation{From: "json:Signature"},
		PublicKeys:      []string{sigtest.PEMPublic(&key.PublicKey)},
	})
	if err != nil {
		t.Fatal(err)
	}
	body := func(version string, h crypto.Hash) []byte {
		sig := base64.StdEncoding.EncodeToString(sigtest.RSASign(key, h, false, []byte("hello")))
		if version == "" {
			return []byte(`{"Message":"hello","Signature":"` + sig + `"}`)
		}
		return []byte(`{"Message":"hello","SignatureVersion":"` + version + `","Signature":"` + sig + `"}`)
	}
	for _, c := range []struct {
		version string
		h       crypto.Hash
		want    *signature.Error
	}{
		{"1", crypto.SHA1, nil},
		{"2", crypto.SHA256, nil},
		{"1", crypto.SHA256, signature.ErrInvalid},
		{"2", crypto.SHA1, signature.ErrInvalid},
		{"3", crypto.SHA256, signature.ErrInvalid},
		{"", crypto.SHA1, signature.ErrMissing},
	} {
		d := sigtest.NewDelivery("/", body(c.version, c.h), time.Time{})
		if err := v.Verify(d.Req, d.Body); (err == nil) != (c.want == nil) {
			t.Errorf("version %q signed with %v: %v", c.version, c.h, err)
		} else if c.want != nil {
			sigtest.WantReason(t, err, c.want)
		}
	}
}

// TestTemplateSecretEncoding checks secrets written in hex (Adyen) and
// base64, decoded before use.
func TestTemplateSecretEncoding(t *testing.T) {
	key := []byte{0xdf, 0xb1, 0x00, 0xff, 0x10}
	for _, c := range []struct {
		encoding, secret string
		key              []byte
	}{
		{"hex", "DFB100FF10", key},
		{"base64", base64.StdEncoding.EncodeToString(key), key},
		// WooCommerce signs with its stored secret decoded as WordPress's
		// wp_specialchars_decode(…, ENT_QUOTES) decodes it
		{"html_specialchars", "a&amp;b&lt;c&#039;d&amp;lt;", []byte("a&b<c'd&lt;")},
	} {
		v := hmacTemplate(t, `{body}`, func(cfg *signature.TemplateConfig) {
			cfg.Secrets, cfg.SecretEncoding = []string{c.secret}, c.encoding
		})
		m := hmac.New(sha256.New, c.key)
		m.Write([]byte("payload"))
		d := sigtest.NewDelivery("/", []byte("payload"), time.Time{})
		d.Req.Header.Set("X-Sig", hex.EncodeToString(m.Sum(nil)))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), nil)
		d.Req.Header.Set("X-Sig", signHMAC(c.secret, "payload"))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), signature.ErrInvalid)
	}
}

// TestTemplateTimestampUnits checks timestamps in seconds, milliseconds
// and RFC 3339, in a header and in the body.
func TestTemplateTimestampUnits(t *testing.T) {
	signature.SetClock(t, templateNow)
	for _, c := range []struct {
		unit, from     string
		fresh, stale   string
		tolerance      time.Duration
		invalidExample string
	}{
		{"s", "header:Ts", "1767225600", "1767225000", 0, "17672256OO"},
		{"ms", "header:Ts", "1767225600123", "1767225000000", 0, "-1"},
		{"rfc3339", "json:time", "2026-01-01T00:00:30.5Z", "2025-12-31T23:58:00Z", time.Minute, "2026-01-01"},
	} {
		t.Run(c.unit, func(t *testing.T) {
			v := hmacTemplate(t, `{body}`, func(cfg *signature.TemplateConfig) {
				cfg.Timestamp = signature.TimestampLocation{From: c.from, Unit: c.unit}
				cfg.Tolerance = c.tolerance
			})
			check := func(ts string, want *signature.Error) {
				t.Helper()
				body := []byte(`{"time":"` + ts + `"}`)
				d := sigtest.NewDelivery("/", body, time.Time{})
				d.Req.Header.Set("Ts", ts)
				d.Req.Header.Set("X-Sig", signHMAC("k", string(body)))
				sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
			}
			check(c.fresh, nil)
			check(c.stale, signature.ErrTimestamp)
			check(c.invalidExample, signature.ErrInvalid)
		})
	}
}

// TestTemplateItems checks Items mode: every item signed on its own must
// verify; one bad item refuses the delivery; an empty list, or none, is
// a missing signature; more items than the bound are refused.
func TestTemplateItems(t *testing.T) {
	v := hmacTemplate(t, `{json.ref}:{json.amount.value}:{json.success}`, func(c *signature.TemplateConfig) {
		c.Items = "json:items.#.Item"
		c.Signature = signature.SignatureLocation{From: "json:extra.sig", Encoding: "base64"}
		c.MaxItems = 3
	})
	item := func(ref, value, key string) string {
		m := hmac.New(sha256.New, []byte(key))
		m.Write([]byte(ref + ":" + value + ":true"))
		sig := base64.StdEncoding.EncodeToString(m.Sum(nil))
		return `{"Item":{"ref":"` + ref + `","amount":{"value":` + value + `},"success":"true","extra":{"sig":"` + sig + `"}}}`
	}
	check := func(want *signature.Error, body string) {
		t.Helper()
		d := sigtest.NewDelivery("/", []byte(body), time.Time{})
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
	}
	check(nil, `{"live":"false","items":[`+item("a", "1", "k")+`]}`)
	check(nil, `{"items":[`+item("a", "1", "k")+`,`+item("b", "20", "k")+`,`+item("c", "300", "k")+`]}`)
	check(signature.ErrInvalid, `{"items":[`+item("a", "1", "k")+`,`+item("b", "2", "wrong")+`]}`)
	check(signature.ErrInvalid, `{"items":[`+item("a", "1", "k")+`,`+strings.Replace(item("b", "2", "k"), `"b"`, `"c"`, 1)+`]}`)
	check(signature.ErrInvalid, `{"items":[`+strings.Repeat(item("a", "1", "k")+",", 3)+item("a", "1", "k")+`]}`)
	check(signature.ErrMissing, `{"items":[]}`)
	check(signature.ErrMissing, `{"other":[]}`)
	check(signature.ErrMissing, `{"items":[{"NotItem":{}}]}`)
	check(signature.ErrAmbiguous, `{"items":[`+item("a", "1", "k")+`],"items":[]}`)
	check(signature.ErrAmbiguous, `{"items":[{"Item":{"ref":"a","ref":"b"}}]}`)

	// the body is the array
	for _, items := range []string{"json:#.Item", "json:#"} {
		v := hmacTemplate(t, `{json.ref}:{json.amount.value}:{json.success}`, func(c *signature.TemplateConfig) {
			c.Items = items
			c.Signature = signature.SignatureLocation{From: "json:extra.sig", Encoding: "base64"}
		})
		elem := func(s string) string {
			if items == "json:#" {
				return strings.TrimSuffix(strings.TrimPrefix(s, `{"Item":`), "}")
			}
			return s
		}
		for body, want := range map[string]*signature.Error{
			`[` + elem(item("a", "1", "k")) + `,` + elem(item("b", "2", "k")) + `]`:     nil,
			` [` + elem(item("a", "1", "k")) + "]\r\n":                                  nil,
			`[` + elem(item("a", "1", "k")) + `,` + elem(item("b", "2", "wrong")) + `]`: signature.ErrInvalid,
			`[` + elem(item("a", "1", "k")) + `] [` + elem(item("a", "1", "k")) + `]`:   signature.ErrInvalid,
			`[]`:           signature.ErrMissing,
			`{"items":[]}`: signature.ErrInvalid,
		} {
			d := sigtest.NewDelivery("/", []byte(body), time.Time{})
			if err := v.Verify(d.Req, d.Body); (err == nil) != (want == nil) {
				t.Errorf("%s, %.40s: %v", items, body, err)
			} else if want != nil {
				sigtest.WantReason(t, err, want)
			}
		}
	}
}

// TestTemplateConfigErrors checks that a bad configuration is an error
// that starts with the option's name.
func TestTemplateConfigErrors(t *testing.T) {
	rsaPub := sigtest.PEMPublic(&sigtest.RSAKey("cfg").PublicKey)
	ok := func() signature.TemplateConfig {
		return signature.TemplateConfig{String: "{body}", Algorithm: "hmac-sha256", Secrets: []string{"s"},
			Signature: signature.SignatureLocation{From: "header:Sig"}}
	}
	for _, c := range []struct {
		name, option string
		edit         func(*signature.TemplateConfig)
	}{
		{"no string", "string:", func(c *signature.TemplateConfig) { c.String = "" }},
		{"unknown field", "string:", func(c *signature.TemplateConfig) { c.String = "{bodies}" }},
		{"unclosed field", "string:", func(c *signature.TemplateConfig) { c.String = "{body" }},
		{"unknown escape", "string:", func(c *signature.TemplateConfig) { c.String = `a\qb` }},
		{"unclosed optional", "string:", func(c *signature.TemplateConfig) { c.String = "[{header.A}" }},
		{"optional without field", "string:", func(c *signature.TemplateConfig) { c.String = "[text]{body}" }},
		{"nested optional", "string:", func(c *signature.TemplateConfig) { c.String = "[[{header.A}]]" }},
		{"stray bracket", "string:", func(c *signature.TemplateConfig) { c.String = "{body}]" }},
		{"empty json path", "string:", func(c *signature.TemplateConfig) { c.String = "{json.a..b}" }},
		{"url without public URL", "string:", func(c *signature.TemplateConfig) { c.String = "{url}" }},
		{"unknown algorithm", "algorithm:", func(c *signature.TemplateConfig) { c.Algorithm = "hmac-md5" }},
		{"no algorithm", "algorithm:", func(c *signature.TemplateConfig) { c.Algorithm = "" }},
		{"algorithm twice", "algorithm:", func(c *signature.TemplateConfig) {
			c.AlgorithmField, c.AlgorithmValues = "json:v", map[string]string{"1": "hmac-sha1"}
		}},
		{"mixed key kinds", "algorithm:", func(c *signature.TemplateConfig) {
			c.Algorithm, c.AlgorithmField = "", "json:v"
			c.AlgorithmValues = map[string]string{"1": "hmac-sha1", "2": "rsa-sha256"}
		}},
		{"no signature", "signature:", func(c *signature.TemplateConfig) { c.Signature.From = "" }},
		{"bad signature source", "signature:", func(c *signature.TemplateConfig) { c.Signature.From = "cookie:x" }},
		{"bad encoding", "signature:", func(c *signature.TemplateConfig) { c.Signature.Encoding = "base32" }},
		{"format without ECDSA", "signature:", func(c *signature.TemplateConfig) { c.Signature.Format = "raw" }},
		{"bad timestamp", "timestamp:", func(c *signature.TemplateConfig) { c.Timestamp.From = "body" }},
		{"bad unit", "timestamp:", func(c *signature.TemplateConfig) {
			c.Timestamp = signature.TimestampLocation{From: "header:T", Unit: "h"}
		}},
		{"negative tolerance", "tolerance:", func(c *signature.TemplateConfig) { c.Tolerance = -time.Second }},
		{"no secret", "secret:", func(c *signature.TemplateConfig) { c.Secrets = nil }},
		{"bad hex secret", "secret 1:", func(c *signature.TemplateConfig) { c.SecretEncoding = "hex"; c.Secrets = []string{"zz"} }},
		{"unknown secret encoding", "secret_encoding", func(c *signature.TemplateConfig) { c.SecretEncoding = "rot13" }},
		{"public key with HMAC", "public_key:", func(c *signature.TemplateConfig) { c.PublicKeys = []string{rsaPub} }},
		{"secret with RSA", "secret:", func(c *signature.TemplateConfig) { c.Algorithm = "rsa-sha256" }},
		{"no key for RSA", "public_key:", func(c *signature.TemplateConfig) { c.Algorithm, c.Secrets = "rsa-sha256", nil }},
		{"wrong key kind", "public_key 1:", func(c *signature.TemplateConfig) {
			c.Algorithm, c.Secrets, c.PublicKeys = "ed25519", nil, []string{rsaPub}
		}},
		{"key and cert", "public_key:", func(c *signature.TemplateConfig) {
			c.Algorithm, c.Secrets, c.PublicKeys = "rsa-sha256", nil, []string{rsaPub}
			c.CertURL = signature.CertURLConfig{From: "header:Cert", Hosts: []string{"x"}}
		}},
		{"cert without hosts", "cert_url:", func(c *signature.TemplateConfig) {
			c.Algorithm, c.Secrets = "rsa-sha256", nil
			c.CertURL = signature.CertURLConfig{From: "header:Cert"}
		}},
		{"bad host pattern", "cert_url:", func(c *signature.TemplateConfig) {
			c.Algorithm, c.Secrets = "rsa-sha256", nil
			c.CertURL = signature.CertURLConfig{From: "header:Cert", Hosts: []string{"("}}
		}},
		{"cert in the query", "cert_url:", func(c *signature.TemplateConfig) {
			c.Algorithm, c.Secrets = "rsa-sha256", nil
			c.CertURL = signature.CertURLConfig{From: "query:cert", Hosts: []string{"x"}}
		}},
		{"items without json:", "items:", func(c *signature.TemplateConfig) { c.Items = "items.#" }},
		{"items without #", "items:", func(c *signature.TemplateConfig) { c.Items = "json:items" }},
		{"items with a header signature", "items:", func(c *signature.TemplateConfig) { c.Items = "json:items.#" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := ok()
			c.edit(&cfg)
			_, err := signature.NewTemplate(cfg)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.HasPrefix(err.Error(), c.option) {
				t.Fatalf("error %q does not start with %q", err, c.option)
			}
			if strings.Contains(err.Error(), "zz") && c.option == "secret 1:" {
				t.Fatalf("error %q quotes the secret", err)
			}
		})
	}
	if _, err := signature.NewTemplate(ok()); err != nil {
		t.Fatalf("the base configuration: %v", err)
	}
}

// TestTemplateAllocations checks that the template's request path
// allocates nothing for an HMAC over headers and the body, nor over JSON
// fields (escaped strings included), nor per item.
func TestTemplateAllocations(t *testing.T) {
	if testkit.RaceEnabled {
		t.Skip("the race detector makes sync.Pool drop items: make test measures allocations in a run without it")
	}
	signature.SetClock(t, templateNow)
	ts := strconv.FormatInt(templateNow.Unix(), 10)
	body := sigtest.BenchBody("template")
	header := hmacTemplate(t, `{method}:{header.X-Ts}:{body}`, func(c *signature.TemplateConfig) {
		c.Timestamp = signature.TimestampLocation{From: "header:X-Ts"}
		c.Signature.Prefix = "v1="
	})
	d := sigtest.NewDelivery("/", body, time.Time{})
	d.Req.Header.Set("X-Ts", ts)
	d.Req.Header.Set("X-Sig", "v1="+signHMAC("k", "POST:"+ts+":"+string(body)))

	fields := hmacTemplate(t, `Message\n{json.Message}\n[Subject\n{json.Subject}\n]{json.n}`)
	jsonBody := []byte(`{"Message":"a \"quoted\"\nline \u00e9\/","Subject":"s","n":12}`)
	dj := sigtest.NewDelivery("/", jsonBody, time.Time{})
	dj.Req.Header.Set("X-Sig", signHMAC("k", "Message\na \"quoted\"\nline é/\nSubject\ns\n12"))

	items := hmacTemplate(t, `{json.ref}:{json.value}`, func(c *signature.TemplateConfig) {
		c.Items = "json:items.#.Item"
		c.Signature = signature.SignatureLocation{From: "json:sig"}
	})
	item := `{"Item":{"ref":"a\/b","value":1000,"sig":"` + signHMAC("k", "a/b:1000") + `"}}`
	da := sigtest.NewDelivery("/", []byte(`{"items":[`+item+`,`+item+`]}`), time.Time{})

	// `t=…,v1=…`, the timestamp signed through {timestamp}
	params := hmacTemplate(t, `{timestamp}.{body}`, func(c *signature.TemplateConfig) {
		c.Signature = signature.SignatureLocation{From: "header:X-Sig", Separator: ",", Prefix: "v1="}
		c.Timestamp = signature.TimestampLocation{From: "header:X-Sig", Separator: ",", Prefix: "t="}
	})
	dp := sigtest.NewDelivery("/", body, time.Time{})
	dp.Req.Header.Set("X-Sig", "t="+ts+",v0=x,v1="+signHMAC("k", ts+"."+string(body)))

	// Persona's sets of `t=…,v1=…`
	sets := hmacTemplate(t, `{timestamp}.{body}`, func(c *signature.TemplateConfig) {
		c.Signature = signature.SignatureLocation{From: "header:Sig", Sets: " ", Separator: ",", Prefix: "v1="}
		c.Timestamp = signature.TimestampLocation{From: "header:Sig", Separator: ",", Prefix: "t="}
	})
	ds := sigtest.NewDelivery("/", body, time.Time{})
	ds.Req.Header.Set("Sig", "t="+ts+",v1="+signHMAC("old", ts+"."+string(body))+" t="+ts+",v1="+signHMAC("k", ts+"."+string(body)))

	for name, c := range map[string]struct {
		v signature.Verifier
		d *sigtest.Delivery
	}{"header and body": {header, d}, "JSON fields": {fields, dj}, "items": {items, da}, "parameters": {params, dp}, "parameters in sets": {sets, ds}} {
		if n := testing.AllocsPerRun(100, func() {
			if err := c.v.Verify(c.d.Req, c.d.Body); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: %v allocations per verify, want none", name, n)
		}
	}
}

// Claims are signed members the delivery must hold one of the values of:
// an unexpected value, or none, is refused although the signature
// matches; a member the string does not sign cannot be a claim.
func TestTemplateClaims(t *testing.T) {
	tmpl := `{json.topic}:{json.id}`
	v := hmacTemplate(t, tmpl, func(c *signature.TemplateConfig) {
		c.Signature = signature.SignatureLocation{From: "header:Sig"}
		c.Claims = map[string][]string{"topic": {"orders", "refunds"}}
	})
	for body, want := range map[string]*signature.Error{
		`{"topic":"orders","id":"1"}`:      nil,
		`{"topic":"refunds","id":"1"}`:     nil,
		`{"topic":"ord\u0065rs","id":"1"}`: nil,
		`{"topic":"other","id":"1"}`:       signature.ErrInvalid,
		`{"id":"1"}`:                       signature.ErrInvalid,
		`{"topic":null,"id":"1"}`:          signature.ErrInvalid,
	} {
		d := sigtest.NewDelivery("/", []byte(body), time.Time{})
		var doc struct{ Topic, ID string }
		_ = json.Unmarshal([]byte(body), &doc)
		d.Req.Header.Set("Sig", signHMAC("k", doc.Topic+":"+doc.ID))
		sigtest.WantReason(t, v.Verify(d.Req, d.Body), want)
	}
	for name, claims := range map[string]map[string][]string{
		"not signed": {"other": {"x"}},
		"no value":   {"topic": {}},
	} {
		_, err := signature.NewTemplate(signature.TemplateConfig{String: tmpl, Algorithm: signature.HMACSHA256, Secrets: []string{"k"},
			Signature: signature.SignatureLocation{From: "header:Sig"}, Claims: claims})
		if err == nil || !strings.HasPrefix(err.Error(), "claim") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
