package signature

import "testing"

// TestDecodeHTMLSpecialChars: the references wp_specialchars_decode($s,
// ENT_QUOTES) decodes (its translation table and the zero padding it
// removes from numeric references, wp-includes/formatting.php), in one
// pass, and nothing else.
func TestDecodeHTMLSpecialChars(t *testing.T) {
	for in, want := range map[string]string{
		"plain secret":                     "plain secret",
		"a&amp;b&lt;c&gt;d&quot;e":         `a&b<c>d"e`,
		"&#039;&#39;&#0039;&#x27;&#X0027;": "'''''",
		"&#034;&#34;&#x22;&#X022;":         `""""`,
		"&#060;&#60;&#062;&#0062;":         "<<>>",
		"&#038;&#38;&#x26;&#x0026;":        "&&&&",
		"&amp;lt;":                         "&lt;",  // one pass
		"&amp;amp;":                        "&amp;", // one pass
		"&apos;&nbsp;&eacute;&#x3c;":       "&apos;&nbsp;&eacute;&#x3c;",
		"&#39 &lt &#x27":                   "&#39 &lt &#x27",
		"&#0;&#;&#x;&":                     "&#0;&#;&#x;&",
		"&&amp;&":                          "&&&",
		"&LT;&Amp;":                        "&LT;&Amp;",
		"x&#60;&#0060;y":                   "x<<y",
		"&#x3C;&#390;":                     "&#x3C;&#390;",
	} {
		if got := decodeHTMLSpecialChars(in); got != want {
			t.Errorf("%q: got %q, want %q", in, got, want)
		}
	}
}
