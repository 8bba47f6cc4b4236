package signature

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzParseTemplate checks that the template parser never panics, that
// what it accepts is well formed (optional parts in order, each with a
// field; no empty text), that text without special characters is taken
// as it is, and that building the string of an accepted template from any
// request never panics.
func FuzzParseTemplate(f *testing.F) {
	for _, s := range []string{
		`{body}`,
		`v0:{header.X-Slack-Request-Timestamp}:{body}`,
		`Message\n{json.Message}\n[Subject\n{json.Subject}\n]Type\n{json.Type}\n`,
		`{header.Paypal-Transmission-Id}|{body.crc32}|{body.sha256}`,
		`{method}{url}{query.a\.b}{json.a\.b.0}\t\\\{\}\[\]`,
		`[{json.a}][{header.B}]`,
		`{json.}`, `{`, `}`, `[`, `]`, `\`, `[[{json.a}]]`, `{json.a{b}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		paths := newJSONPaths()
		tmpl, err := parseTemplate(s, paths)
		if s != "" && !strings.ContainsAny(s, `\{}[]`) {
			if err != nil || len(tmpl.parts) != 1 || tmpl.parts[0].text != s {
				t.Fatalf("plain text %q: %v", s, err)
			}
		}
		if err != nil {
			return
		}
		prev := 0
		for _, g := range tmpl.groups {
			if g.from < prev || g.to < g.from || g.to > len(tmpl.parts) || !tmpl.hasField(g) {
				t.Fatalf("bad optional part %+v of %d parts", g, len(tmpl.parts))
			}
			prev = g.to
		}
		for _, p := range tmpl.parts {
			if p.kind == partText && p.text == "" {
				t.Fatal("an empty text part")
			}
			if p.kind == partJSON && (p.leaf < 0 || p.leaf >= paths.leaves) {
				t.Fatalf("JSON leaf %d of %d", p.leaf, paths.leaves)
			}
		}
		v := &templateVerifier{tmpl: tmpl, paths: paths, publicURL: func(dst []byte, r *http.Request) []byte { return append(dst, r.URL.Path...) }}
		st := &templateState{spans: make([]jsonSpan, paths.leaves), include: make([]bool, len(tmpl.groups))}
		body := []byte(`{"a":"x\n","b":{"c":[1,{"d":null}]},"Message":"m"}`)
		r := httptest.NewRequest("POST", "/p?a.b=1&q=%zz", nil)
		r.Header.Set("B", "b")
		_ = paths.readJSON(body, st.spans)
		_ = v.build(st, r, body, false)
		_ = v.build(st, r, body, true)
	})
}

// FuzzJSONFields checks the JSON reader against encoding/json: it never
// panics; on valid JSON it never answers ErrInvalid; when it reads a
// value, the value is the one encoding/json decodes (a string decoded,
// null and absence alike), and ErrAmbiguous only where a member on the
// path is given twice or in another case.
func FuzzJSONFields(f *testing.F) {
	for _, c := range []struct{ body, path string }{
		{`{"a":"x"}`, "a"},
		{`{"a":{"b":"y\u00e9\ud83d\ude00\n"}}`, "a.b"},
		{`{"a":[1,{"b":"z"}]}`, "a.1.b"},
		{`{"a":"x","a":"y"}`, "a"},
		{`{"A":"x","a":"y"}`, "a"},
		{`{"a":null}`, "a"},
		{` {"a" : 1.5e3 , "b":[true,false]} `, "b.1"},
		{`{"a.b":"dot"}`, `a\.b`},
		{`[{"a":"x"}]`, "0.a"},
	} {
		f.Add([]byte(c.body), c.path)
	}
	f.Fuzz(func(t *testing.T, body []byte, path string) {
		paths := newJSONPaths()
		leaf, err := paths.add(path)
		if err != nil {
			return
		}
		spans := make([]jsonSpan, paths.leaves)
		err = paths.readJSON(body, spans)
		for _, sp := range spans {
			if sp.start >= 0 && (sp.start > sp.end || sp.end > len(body)) {
				t.Fatalf("span %+v out of a body of %d", sp, len(body))
			}
		}
		if !json.Valid(body) || !utf8.Valid(body) {
			return
		}
		if err == ErrInvalid {
			t.Fatalf("valid JSON %q refused for %q", body, path)
		}
		segs, _ := splitJSONPath(path)
		want, found, ambiguous := decodedAt(body, segs)
		if err == ErrAmbiguous {
			if !ambiguous {
				t.Fatalf("%q called ambiguous for %q", body, path)
			}
			return
		}
		if err != nil {
			t.Fatalf("%q, %q: %v", body, path, err)
		}
		if ambiguous {
			t.Fatalf("%q: a member of %q given twice, not seen", body, path)
		}
		sp := spans[leaf]
		if (sp.start >= 0) != found {
			t.Fatalf("%q at %q: read %v, encoding/json %v", body, path, sp.start >= 0, found)
		}
		if !found {
			return
		}
		lit := body[sp.start:sp.end]
		var got any
		if err := json.Unmarshal(lit, &got); err != nil {
			t.Fatalf("the value read, %q, is not JSON: %v", lit, err)
		}
		if s, ok := want.(string); ok {
			dec, ok := appendJSONString(nil, lit)
			if !ok || string(dec) != s {
				t.Fatalf("%q decoded as %q, encoding/json %q", lit, dec, s)
			}
		}
	})
}

// decodedAt walks body as encoding/json decodes it along segs: the value
// found (null counts as absent), and whether an object on the way gives
// the member twice or in another case (which encoding/json would resolve
// one way, and Go structs another).
func decodedAt(body []byte, segs []string) (v any, found, ambiguous bool) {
	raw := json.RawMessage(body)
	for _, seg := range segs {
		trimmed := strings.TrimSpace(string(raw))
		switch {
		case strings.HasPrefix(trimmed, "{"):
			dec := json.NewDecoder(strings.NewReader(trimmed))
			dec.Token() // {
			var next json.RawMessage
			n := 0
			for dec.More() {
				tok, _ := dec.Token()
				key := tok.(string)
				var val json.RawMessage
				_ = dec.Decode(&val)
				if strings.EqualFold(key, seg) {
					n++
					if key != seg {
						return nil, false, true
					}
					next = val
				}
			}
			if n > 1 {
				return nil, false, true
			}
			if next == nil {
				return nil, false, false
			}
			raw = next
		case strings.HasPrefix(trimmed, "["):
			var elems []json.RawMessage
			_ = json.Unmarshal(raw, &elems)
			idx, ok := arrayIndex(seg)
			if !ok || idx >= len(elems) {
				return nil, false, false
			}
			raw = elems[idx]
		default:
			return nil, false, false
		}
	}
	if err := json.Unmarshal(raw, &v); err != nil || v == nil {
		return nil, false, false
	}
	return v, true, false
}

// FuzzTemplateParameters checks a signature header holding parameters
// and sets (Persona's `t=…,v1=… t=…,v1=…`, Recurly's positional list):
// any value is refused with one of the errors Verify documents, never
// accepted without the key, and never panics.
func FuzzTemplateParameters(f *testing.F) {
	for _, s := range []string{
		"t=1767225600,v1=ab t=1,v1=cd", "1767225600123,ab,cd", ",,, ", "t=,v1=", "t=1767225600", " t=9 ",
		"v1=" + strings.Repeat("a", 64), strings.Repeat("t=1,v1=a ", 40), "t=1767225600,v1=\xff",
	} {
		f.Add(s)
	}
	persona, err := NewTemplate(TemplateConfig{String: "{timestamp}.{body}", Algorithm: HMACSHA256, Secrets: []string{"k"},
		Signature: SignatureLocation{From: "header:Sig", Sets: " ", Separator: ",", Prefix: "v1="},
		Timestamp: TimestampLocation{From: "header:Sig", Separator: ",", Prefix: "t="}})
	if err != nil {
		f.Fatal(err)
	}
	recurly, err := NewTemplate(TemplateConfig{String: "{timestamp}.{body}", Algorithm: HMACSHA256, Secrets: []string{"k"},
		Signature: SignatureLocation{From: "header:Sig", Separator: ",", Skip: 1},
		Timestamp: TimestampLocation{From: "header:Sig", Separator: ",", Unit: "ms"}})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, value string) {
		for _, v := range []Verifier{persona, recurly} {
			r := httptest.NewRequest("POST", "/", nil)
			r.Header.Set("Sig", value)
			switch err := v.Verify(r, []byte("{}")); err {
			case ErrMissing, ErrInvalid, ErrTimestamp:
			default:
				t.Fatalf("%q: %v", value, err)
			}
		}
	})
}
