package signature

import "strings"

// decodeHTMLSpecialChars decodes the references to HTML's special
// characters as WordPress's wp_specialchars_decode($text, ENT_QUOTES) does
// (wp-includes/formatting.php): `&quot;` `&lt;` `&gt;` `&amp;`, and the
// numeric forms of `'` `"` `<` `>` `&` with any number of leading zeros
// (`&#39;`, `&#039;`, `&#x27;`, `&#X0027;`, `&#34;`, `&#x22;`, `&#60;`,
// `&#62;`, `&#38;`, `&#x26;`), in one pass: what a reference decodes to is
// not read again. Any other `&` is kept. WooCommerce signs with its stored
// webhook secret decoded so (WC_Webhook::generate_signature).
func decodeHTMLSpecialChars(s string) string {
	if !strings.Contains(s, "&") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		if s[i] != '&' {
			b.WriteByte(s[i])
			i++
			continue
		}
		c, n := htmlReference(s[i:])
		if n == 0 {
			b.WriteByte('&')
			i++
			continue
		}
		b.WriteByte(c)
		i += n
	}
	return b.String()
}

// htmlReference returns the character a reference at the start of s
// stands for and its length, or a length of zero.
func htmlReference(s string) (byte, int) {
	for _, named := range [...]struct {
		ref string
		c   byte
	}{{"&quot;", '"'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&amp;", '&'}} {
		if strings.HasPrefix(s, named.ref) {
			return named.c, len(named.ref)
		}
	}
	if !strings.HasPrefix(s, "&#") {
		return 0, 0
	}
	i, hexRef := 2, false
	if i < len(s) && (s[i] == 'x' || s[i] == 'X') {
		i, hexRef = i+1, true
	}
	for i < len(s) && s[i] == '0' {
		i++
	}
	if i+3 > len(s) {
		return 0, 0
	}
	var c byte
	switch ref := s[i : i+3]; {
	case hexRef && ref == "27;", !hexRef && ref == "39;":
		c = '\''
	case hexRef && ref == "22;", !hexRef && ref == "34;":
		c = '"'
	case hexRef && ref == "26;", !hexRef && ref == "38;":
		c = '&'
	case !hexRef && ref == "60;":
		c = '<'
	case !hexRef && ref == "62;":
		c = '>'
	default:
		return 0, 0
	}
	return c, i + 3
}
