package providers

import (
	"os"
	"regexp"
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
