package providers

import (
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestProvidersDocsMatchTable keeps the preset table of docs/providers.md
// in step with the code: every preset has a row, and its default key and
// default ttl are the ones the code applies.
func TestProvidersDocsMatchTable(t *testing.T) {
	data, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	var cols map[string]int
	rows := map[string][]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "|") {
			cols = nil
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		for i := range cells {
			cells[i] = strings.TrimSpace(cells[i])
		}
		if cells[0] == "preset" {
			cols = map[string]int{}
			for i, c := range cells {
				cols[c] = i
			}
			continue
		}
		_, hasKey := cols["default key"]
		_, hasTTL := cols["default ttl"]
		if cols == nil || !hasKey || !hasTTL || !strings.HasPrefix(cells[0], "`") {
			continue
		}
		rows[strings.Trim(cells[0], "`")] = []string{cells[cols["default key"]], cells[cols["default ttl"]]}
	}
	if len(rows) == 0 {
		t.Fatal("no preset table with 'default key' and 'default ttl' columns in docs/providers.md")
	}
	span := regexp.MustCompile("`([^`]*)`")
	for _, p := range All() {
		name := p.Name
		row, ok := rows[name]
		if !ok {
			t.Errorf("%s: no row in docs/providers.md", name)
			continue
		}
		var key []string
		for _, m := range span.FindAllStringSubmatch(row[0], -1) {
			key = append(key, m[1])
		}
		if strings.Join(key, " ") != strings.Join(p.DefaultKey, " ") {
			t.Errorf("%s: docs say key %q, code has %q", name, key, p.DefaultKey)
		}
		ttl := p.TTL
		if ttl == 0 {
			ttl = day // the handler's default ttl
		}
		if want := docsDuration(ttl); row[1] != want {
			t.Errorf("%s: docs say ttl %q, code has %s", name, row[1], want)
		}
	}
	for name := range rows {
		if _, ok := Lookup(name); !ok {
			t.Errorf("docs/providers.md has a row for %s, which is no preset", name)
		}
	}
}

// docsDuration writes a ttl as the docs do: days when whole, else hours.
func docsDuration(d time.Duration) string {
	if d%(24*time.Hour) == 0 && d > 24*time.Hour {
		return strconv.Itoa(int(d/(24*time.Hour))) + "d"
	}
	return strconv.Itoa(int(d/time.Hour)) + "h"
}

// TestBlockPresetsAreInTheDocs: docs/providers.md shows the verify block of
// every preset declared as one, as the preset declares it, so a user can
// copy it for a provider without a preset.
func TestBlockPresetsAreInTheDocs(t *testing.T) {
	data, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Join(strings.Fields(string(data)), " ")
	for _, p := range All() {
		if p.Block == "" {
			continue
		}
		want := strings.Join(strings.Fields("# "+p.Name+" verify "+p.Block), " ")
		if !strings.Contains(docs, want) {
			t.Errorf("docs/providers.md does not show %s's block as it is declared:\n# %s\nverify %s", p.Name, p.Name, p.Block)
		}
	}
}

// TestBlockPresetsEqualTheirBlocks: a delivery the preset's signer signs
// is verified by the generic scheme built from the block the docs show,
// with the same secret: the preset is that block.
func TestBlockPresetsEqualTheirBlocks(t *testing.T) {
	for _, p := range All() {
		if p.Block == "" || p.decl.Scheme != "template" || !p.decl.templateSymmetric() {
			continue
		}
		decl, err := parseDeclaration(p.Block)
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		secret := "block-secret"
		if decl.SecretEncoding == "hex" {
			secret = hex.EncodeToString([]byte(secret))
		}
		decl.Secrets = []string{secret}
		generic := mustBuild(t, decl)
		preset := mustBuild(t, VerifyConfig{Scheme: p.Name, Secrets: []string{secret}})
		s, err := NewSigner(p.Name, SignConfig{Secret: secret, PublicURL: "https://example.com/hook"})
		if err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		body := []byte(`{"id":"evt_block","items":[{"id":"a"}]}`)
		if p.decl.Items != "" {
			body = itemsBody(t, p.decl.Items)
		}
		r := httptest.NewRequest(http.MethodPost, "https://example.com/hook", nil)
		if body, err = s.Sign(r, body, time.Now()); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		if err := generic.Verify(r, body); err != nil {
			t.Errorf("%s: the block refuses what the preset signs: %v", p.Name, err)
		}
		if err := preset.Verify(r, body); err != nil {
			t.Errorf("%s: the preset refuses what it signs: %v", p.Name, err)
		}
	}
}

// itemsBody is a body with one item where a block's `items` path puts
// them (json:a.#.b: {"a":[{"b":{"id":"a"}}]}).
func itemsBody(t *testing.T, items string) []byte {
	t.Helper()
	path := strings.TrimPrefix(items, "json:")
	before, after, _ := strings.Cut(path, "#")
	var item any = map[string]any{"id": "a"}
	inner := strings.Split(strings.Trim(after, "."), ".")
	for i := len(inner) - 1; i >= 0; i-- {
		if inner[i] != "" {
			item = map[string]any{inner[i]: item}
		}
	}
	var doc any = []any{item}
	outer := strings.Split(strings.Trim(before, "."), ".")
	for i := len(outer) - 1; i >= 0; i-- {
		if outer[i] != "" {
			doc = map[string]any{outer[i]: doc}
		}
	}
	b, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHandshakesAreInTheDocs: the Handshakes table of docs/providers.md has
// a row for each preset with a handshake and for no other, its count is
// the one the section states, and docs/caddyfile.md's `handshake` row
// names them all.
func TestHandshakesAreInTheDocs(t *testing.T) {
	data, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "### Handshakes\n")
	end := strings.Index(doc[start+1:], "\n### ")
	if start < 0 || end < 0 {
		t.Fatal("no Handshakes section in docs/providers.md")
	}
	section := doc[start : start+1+end]
	want := HandshakeProviders()
	var rows []string
	cell := regexp.MustCompile("`([a-z_]+)`")
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(strings.Trim(line, "|"), "|", 2)[0]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			rows = append(rows, m[1])
		}
	}
	slices.Sort(rows)
	if !slices.Equal(rows, want) {
		t.Errorf("the Handshakes table lists %q, the presets with a handshake are %q", rows, want)
	}
	words := []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"}
	if len(want) >= len(words) {
		t.Fatalf("%d presets with a handshake: write the number in words here", len(want))
	}
	if n := "Only these " + words[len(want)] + " presets take `handshake`"; !strings.Contains(strings.Join(strings.Fields(section), " "), n) {
		t.Errorf("the Handshakes section does not say %q", n)
	}

	caddyfile, err := os.ReadFile("../docs/caddyfile.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(caddyfile), "\n") {
		if !strings.HasPrefix(line, "| `handshake` |") {
			continue
		}
		var named []string
		for _, m := range cell.FindAllStringSubmatch(line[strings.Index(line, "("):], -1) {
			named = append(named, m[1])
		}
		slices.Sort(named)
		if !slices.Equal(named, want) {
			t.Errorf("docs/caddyfile.md's handshake row names %q, want %q", named, want)
		}
		return
	}
	t.Error("no `handshake` row in docs/caddyfile.md")
}

// TestBatchesAreInTheDocs: the Batches table of docs/providers.md has a
// row for each preset that splits its requests and for no other, with
// the path and the key sources the preset declares.
func TestBatchesAreInTheDocs(t *testing.T) {
	data, err := os.ReadFile("../docs/providers.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	start := strings.Index(doc, "### Batches\n")
	end := strings.Index(doc[start+1:], "\n### ")
	if start < 0 || end < 0 {
		t.Fatal("no Batches section in docs/providers.md")
	}
	span := regexp.MustCompile("`([^`]*)`")
	rows := map[string]string{}
	for _, line := range strings.Split(doc[start:start+1+end], "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		var spans [3][]string
		for i := range min(len(cells), 3) {
			for _, m := range span.FindAllStringSubmatch(cells[i], -1) {
				spans[i] = append(spans[i], m[1])
			}
		}
		rows[strings.Join(spans[0], " ")] = strings.Join(spans[1], " ") + " | " + strings.Join(spans[2], " ")
	}
	for _, p := range All() {
		row, ok := rows[p.Name]
		delete(rows, p.Name)
		switch {
		case p.Batch == nil && ok:
			t.Errorf("the Batches table has %s, which does not split its requests", p.Name)
		case p.Batch == nil:
		case !ok:
			t.Errorf("%s splits its requests: no row in the Batches table", p.Name)
		case row != p.Batch.Path+" | "+strings.Join(p.Batch.Key, " "):
			t.Errorf("%s: the Batches table says %q, the preset %q", p.Name, row, p.Batch.Path+" | "+strings.Join(p.Batch.Key, " "))
		}
	}
	for name := range rows {
		t.Errorf("the Batches table has a row for %s, which is no preset", name)
	}
}
