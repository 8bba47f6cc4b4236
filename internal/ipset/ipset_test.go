package ipset

import (
	"net/netip"
	"strings"
	"testing"
)

func mustSet(t testing.TB, ranges ...string) *Set {
	t.Helper()
	ps, err := ParseAll(ranges)
	if err != nil {
		t.Fatal(err)
	}
	return New(ps)
}

func TestContains(t *testing.T) {
	s := mustSet(t, "192.30.252.0/22", "140.82.112.0/20", "3.18.12.63", "2a0a:a440::/29", "2606:50c0::/32", "::ffff:10.1.2.0/120", "2001:db8::7")
	cases := map[string]bool{
		"192.30.252.0":            true,
		"192.30.255.255":          true,
		"192.30.251.255":          false,
		"192.30.0.1":              false,
		"140.82.127.1":            true,
		"140.82.128.0":            false,
		"3.18.12.63":              true,
		"3.18.12.64":              false,
		"::ffff:3.18.12.63":       true, // IPv4-mapped looks up as IPv4
		"10.1.2.200":              true, // a mapped range became IPv4
		"10.1.3.0":                false,
		"2a0a:a440::1":            true,
		"2a0a:a447:ffff::1":       true,
		"2a0a:a448::1":            false,
		"2606:50c0:0:1::":         true,
		"2606:50c1::":             false,
		"2001:db8::7":             true,
		"2001:db8::8":             false,
		"2001:db8::7%eth0":        true, // a zone is ignored
		"127.0.0.1":               false,
		"::1":                     false,
		"fe80::1":                 false,
		"0.0.0.0":                 false,
		"255.255.255.255":         false,
		"::ffff:192.30.253.17":    true,
		"2a0a:a43f:ffff:ffff::ff": false,
	}
	for in, want := range cases {
		if got := s.Contains(netip.MustParseAddr(in)); got != want {
			t.Errorf("Contains(%s) = %v, want %v", in, got, want)
		}
	}
	if s.Len() != 7 {
		t.Errorf("Len = %d, want 7", s.Len())
	}
	var none *Set
	if none.Contains(netip.MustParseAddr("1.2.3.4")) || none.Len() != 0 {
		t.Error("a nil set holds something")
	}
	if s.Contains(netip.Addr{}) {
		t.Error("the zero address is in the set")
	}
}

func TestContainsWholeSpaces(t *testing.T) {
	s := mustSet(t, "0.0.0.0/0")
	if !s.Contains(netip.MustParseAddr("203.0.113.9")) || s.Contains(netip.MustParseAddr("2001:db8::1")) {
		t.Error("0.0.0.0/0 must hold every IPv4 address and no IPv6 one")
	}
	s = mustSet(t, "::/0")
	if !s.Contains(netip.MustParseAddr("2001:db8::1")) || s.Contains(netip.MustParseAddr("203.0.113.9")) {
		t.Error("::/0 must hold every IPv6 address and no IPv4 one")
	}
	s = mustSet(t, "2001:db8::/65", "2001:db8::ff/128")
	if !s.Contains(netip.MustParseAddr("2001:db8::7fff:0:0:1")) || s.Contains(netip.MustParseAddr("2001:db8:0:0:8000::1")) {
		t.Error("a /65 range is matched on 65 bits")
	}
}

func TestParsePrefix(t *testing.T) {
	good := map[string]string{
		"192.0.2.7":            "192.0.2.7/32",
		"192.0.2.7/24":         "192.0.2.0/24",
		"::ffff:192.0.2.7":     "192.0.2.7/32",
		"::ffff:192.0.2.0/120": "192.0.2.0/24",
		"2001:DB8::1":          "2001:db8::1/128",
		"2001:db8::1/32":       "2001:db8::/32",
	}
	for in, want := range good {
		p, err := ParsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("ParsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for _, in := range []string{"", "hooks", "192.0.2.256", "192.0.2.0/33", "fe80::1%eth0", "::ffff:0:0/80", "192.0.2.0/", "1.2.3.4 5.6.7.8"} {
		if _, err := ParsePrefix(in); err == nil {
			t.Errorf("ParsePrefix(%q) accepted", in)
		}
	}
}

func TestCanonicalDeduplicates(t *testing.T) {
	s := mustSet(t, "192.0.2.9/24", "192.0.2.0/24", "::ffff:192.0.2.0/120", "198.51.100.1")
	if got := strings.Join(s.Strings(), " "); got != "192.0.2.0/24 198.51.100.1" {
		t.Fatalf("Strings = %q", got)
	}
}

func TestParseText(t *testing.T) {
	ps, err := Parse([]byte("# Stripe webhooks\n3.18.12.63\n\n  3.130.192.231  \n13.235.14.237 # Mumbai\n2a0a:a440::/29\r\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(New(ps).Strings(), " "); got != "3.18.12.63 3.130.192.231 13.235.14.237 2a0a:a440::/29" {
		t.Fatalf("parsed %q", got)
	}
	for name, in := range map[string]string{
		"empty":         "",
		"comments only": "# nothing\n\n",
		"a word":        "3.18.12.63\nnot-an-address\n",
		"html":          "<html><body>Service Unavailable</body></html>",
	} {
		if _, err := Parse([]byte(in), ""); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := Parse([]byte("3.18.12.63\n"), "hooks"); err == nil {
		t.Error("a text list was read for a JSON field")
	}
}

func TestParseJSON(t *testing.T) {
	cases := []struct {
		name, field, doc, want string
	}{
		{"array", "", `["3.18.12.63", "2a0a:a440::/29"]`, "3.18.12.63 2a0a:a440::/29"},
		{"github meta", "hooks", `{"verifiable_password_authentication":true,"hooks":["192.30.252.0/22","2a0a:a440::/29"],"domains":{"website":["*.github.com"]},"web":["20.201.28.151/32"]}`, "192.30.252.0/22 2a0a:a440::/29"},
		{"stripe", "WEBHOOKS", `{"WEBHOOKS":["3.18.12.63","3.130.192.231"]}`, "3.18.12.63 3.130.192.231"},
		{"nested field", "data.ipv4_cidrs", `{"data":{"ipv4_cidrs":["34.194.127.46/32"]},"meta":{"request_id":"x"}}`, "34.194.127.46"},
		{"by region", "", `{"us":["44.228.126.217","2600:1f24:64:8000::/56"],"eu":["52.215.16.239"]}`, "44.228.126.217 52.215.16.239 2600:1f24:64:8000::/56"},
		{"scalars ignored", "", `{"updated":"2026-01-01","count":2,"ips":["192.0.2.1","192.0.2.2"]}`, "192.0.2.1 192.0.2.2"},
		{"objects in arrays", "", `{"ranges":[{"cidr":"192.0.2.0/24","service":"WEBHOOKS"}]}`, ""},
	}
	for _, c := range cases {
		ps, err := Parse([]byte(c.doc), c.field)
		if c.want == "" {
			// an array of objects holds no array of strings: nothing found
			if err == nil {
				t.Errorf("%s: accepted %v", c.name, ps)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if got := strings.Join(New(ps).Strings(), " "); got != c.want {
			t.Errorf("%s: parsed %q, want %q", c.name, got, c.want)
		}
	}
}

func TestParseJSONRefusesMalformed(t *testing.T) {
	cases := []struct{ name, field, doc string }{
		{"truncated", "", `["3.18.12.63",`},
		{"trailing data", "", `["3.18.12.63"] ["1.2.3.4"]`},
		{"field absent", "hooks", `{"web":["192.0.2.1"]}`},
		{"field not an array", "hooks", `{"hooks":"192.0.2.1"}`},
		{"field path through a scalar", "data.ips", `{"data":"x"}`},
		{"empty field", "hooks", `{"hooks":[]}`},
		{"a bad entry", "hooks", `{"hooks":["192.0.2.1","evil"]}`},
		{"a number entry", "hooks", `{"hooks":["192.0.2.1",7]}`},
		{"hostnames in an object", "", `{"ips":["192.0.2.1"],"domains":["*.github.com"]}`},
		{"empty object", "", `{}`},
		{"empty array", "", `[]`},
	}
	for _, c := range cases {
		if ps, err := Parse([]byte(c.doc), c.field); err == nil {
			t.Errorf("%s: accepted %v", c.name, ps)
		}
	}
}

func TestParseBounded(t *testing.T) {
	var b strings.Builder
	for i := 0; i <= MaxRanges; i++ {
		b.WriteString("10.0.0.1\n")
	}
	if _, err := Parse([]byte(b.String()), ""); err == nil {
		t.Fatal("a list of more than MaxRanges ranges was accepted")
	}
}

func TestContainsAllocatesNothing(t *testing.T) {
	s := mustSet(t, "192.30.252.0/22", "140.82.112.0/20", "185.199.108.0/22", "2a0a:a440::/29")
	for _, in := range []string{"140.82.115.7", "203.0.113.9", "2a0a:a440::9", "::ffff:140.82.115.7"} {
		a := netip.MustParseAddr(in)
		if n := testing.AllocsPerRun(100, func() { s.Contains(a) }); n != 0 {
			t.Errorf("Contains(%s) allocates %.0f times", in, n)
		}
	}
}

// BenchmarkContains is the allow list's cost on the request path: the
// client address, as Caddy sets it, parsed and looked up in a list the
// size of GitHub's and Stripe's together.
func BenchmarkContains(b *testing.B) {
	ranges := []string{"192.30.252.0/22", "185.199.108.0/22", "140.82.112.0/20", "143.55.64.0/20", "2a0a:a440::/29", "2606:50c0::/32"}
	for i := range 40 {
		ranges = append(ranges, netip.AddrFrom4([4]byte{54, 187, byte(i), 7}).String())
	}
	s := mustSet(b, ranges...)
	for _, in := range []string{"140.82.115.7", "203.0.113.9", "2606:50c0::1"} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				a, err := netip.ParseAddr(in)
				if err != nil || s.Contains(a) != (in != "203.0.113.9") {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}
