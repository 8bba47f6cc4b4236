package testkit

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// What the tests read from files: the repository's own (docs, rules,
// Makefile) and the JSON logs a Caddy writes.

// ReadFile returns the file name (a path from the test's package
// directory), failing the test when it cannot be read.
func ReadFile(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// ReadLogLines reads the whole lines of a JSON-lines log file that Caddy
// may still be writing (a last line without its newline is left out); a
// file not written yet has no lines.
func ReadLogLines(t testing.TB, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	} else {
		b = nil
	}
	var out []map[string]any
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(line, &m); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, line)
		}
		out = append(out, m)
	}
	return out
}
