package webhookidempotency

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/webhookguard/caddy-webhook-idempotency/internal/testkit"
)

// The documentation's Caddyfiles are tests. In README.md and docs/*.md
// every fenced block names its language; a Caddyfile is fenced `caddy` (or
// `caddyfile`) when it is a configuration to copy, and `caddy-template`
// when it is a grammar (`<duration>`, `[<path>]`, `a | b`, `...`). Every
// configuration adapts, as `caddy adapt` does (a fragment, such as a
// directive or a handle block, inside a site), and is as `caddy fmt`
// writes it. Caddyfile.example is held to the same.

// docFence is a fenced block of a Markdown file.
type docFence struct {
	file string
	line int // of the opening fence
	lang string
	text string
}

// docFences returns the fenced blocks of the documentation.
func docFences(t *testing.T) []docFence {
	t.Helper()
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	var out []docFence
	for _, file := range files {
		lines := strings.Split(testkit.ReadFile(t, file), "\n")
		for i := 0; i < len(lines); i++ {
			trimmed := strings.TrimLeft(lines[i], " ")
			if !strings.HasPrefix(trimmed, "```") {
				continue
			}
			indent := len(lines[i]) - len(trimmed)
			f := docFence{file: file, line: i + 1, lang: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
			var body []string
			for i++; i < len(lines) && strings.TrimLeft(lines[i], " ") != "```"; i++ {
				body = append(body, strings.TrimPrefix(lines[i], strings.Repeat(" ", indent)))
			}
			if i == len(lines) {
				t.Fatalf("%s:%d: the fence is never closed", file, f.line)
			}
			f.text = strings.Join(body, "\n") + "\n"
			out = append(out, f)
		}
	}
	return out
}

// grammarMarks are what a grammar has and a configuration has not: a
// <placeholder>, an ellipsis, alternatives.
var grammarMarks = regexp.MustCompile(`<[a-z][a-z _-]*>|\.\.\.|…|\s\|\s`)

// siteAddress matches the first token of a site block: a host, a port, a
// URL; a directive has none of '.', ':' and '/'.
var siteAddress = regexp.MustCompile(`^(https?://|:\d|localhost|\*\.|[a-z0-9-]+\.[a-z0-9.-]+)`)

// wrapFragment returns a snippet as a whole Caddyfile: as it is when it
// starts with the global options or a site, else inside a site.
func wrapFragment(snippet string) string {
	for _, line := range strings.Split(snippet, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if line == "{" || siteAddress.MatchString(line) {
			return snippet
		}
		break
	}
	var b strings.Builder
	b.WriteString("example.com {\n")
	for _, line := range strings.Split(strings.TrimRight(snippet, "\n"), "\n") {
		if line != "" {
			b.WriteString("\t" + line)
		}
		b.WriteString("\n")
	}
	b.WriteString("}\n")
	return b.String()
}

// withoutComments drops the # comments of a Caddyfile (outside quotes it
// is good enough for the grammar marks).
func withoutComments(s string) string {
	var b strings.Builder
	for _, line := range strings.Split(s, "\n") {
		if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ' || line[i-1] == '\t') {
			line = line[:i]
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

func TestDocsCaddyfiles(t *testing.T) {
	fences := docFences(t)
	configs := 0
	for _, f := range fences {
		where := fmt.Sprintf("%s:%d", f.file, f.line)
		switch f.lang {
		case "":
			t.Errorf("%s: a fence without a language: tag it (caddy for a Caddyfile to copy, caddy-template for a grammar, text, sh, json, …)", where)
		case "caddy", "caddyfile":
			configs++
			if m := grammarMarks.FindString(withoutComments(f.text)); m != "" {
				t.Errorf("%s: %q is grammar, not configuration: fence a grammar as caddy-template, or write a value", where, m)
				continue
			}
			checkDocCaddyfile(t, where, f.text)
		}
	}
	if configs < 30 {
		t.Fatalf("found %d Caddyfile configurations in the docs, want at least 30", configs)
	}
	checkDocCaddyfile(t, "Caddyfile.example", testkit.ReadFile(t, "Caddyfile.example"))
}

// checkDocCaddyfile checks that a configuration of the docs adapts and is
// formatted as `caddy fmt` writes it.
func checkDocCaddyfile(t *testing.T, where, text string) {
	t.Helper()
	if formatted := caddyfile.Format([]byte(text)); !bytes.Equal(formatted, []byte(text)) {
		t.Errorf("%s: not as caddy fmt writes it; caddy fmt writes:\n%s", where, formatted)
	}
	if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(wrapFragment(text)), map[string]any{"filename": where}); err != nil {
		t.Errorf("%s: does not adapt: %v\n%s", where, err, text)
	}
}

// TestDocsFencesRecognized: the checks above see what they must: a
// grammar fenced caddy is caught, a fragment is wrapped, a site is not.
func TestDocsFencesRecognized(t *testing.T) {
	for _, tc := range []struct {
		snippet string
		grammar bool
		wrapped bool
	}{
		{"webhook_idempotency stripe {\n\tttl <duration>\n}\n", true, true},
		{"store redis [<redis url>] {\n\tdb <n>\n}\n", true, true},
		{"webhook_idempotency stripe {\n\tsecret {env.S}\n}\n", false, true},
		{"handle /x {\n\trespond 200\n}\n", false, true},
		{"example.com {\n\trespond 200\n}\n", false, false},
		{"http://localhost:2020 {\n\trespond 200\n}\n", false, false},
		{":8080 {\n\trespond 200\n}\n", false, false},
		{"{\n\tadmin off\n}\n", false, false},
		{"# a comment\nexample.com {\n\trespond 200 # fine\n}\n", false, false},
	} {
		if got := grammarMarks.MatchString(withoutComments(tc.snippet)); got != tc.grammar {
			t.Errorf("%q: grammar %v, want %v", tc.snippet, got, tc.grammar)
		}
		if got := wrapFragment(tc.snippet) != tc.snippet; got != tc.wrapped {
			t.Errorf("%q: wrapped %v, want %v", tc.snippet, got, tc.wrapped)
		}
	}
	if !strings.HasPrefix(wrapFragment("respond 200\n"), "example.com {\n\trespond 200\n}") {
		t.Errorf("wrapped: %q", wrapFragment("respond 200\n"))
	}
}
