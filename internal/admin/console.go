package admin

import (
	"embed"
	"net/http"
	"path"
)

// The console (docs/admin.md#console): one page served by the admin API,
// its assets embedded in the binary. It calls the admin API from its own
// origin; the Content-Security-Policy allows nothing else: no inline
// script or style, no other origin, no framing.

//go:embed console
var consoleFiles embed.FS

// consoleAssets are the console's files and their content types.
var consoleAssets = map[string]string{
	"index.html":  "text/html; charset=utf-8",
	"console.js":  "text/javascript; charset=utf-8",
	"console.css": "text/css; charset=utf-8",
	"charts.js":   "text/javascript; charset=utf-8",
	"charts.css":  "text/css; charset=utf-8",
}

// consoleCSP is the console's Content-Security-Policy.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// serveConsole serves the page (no name) or one of its assets.
func serveConsole(w http.ResponseWriter, _ *http.Request, name []string) error {
	file := "index.html"
	if len(name) == 1 {
		file = name[0]
	}
	ctype, ok := consoleAssets[file]
	if !ok {
		return errNotFound
	}
	b, err := consoleFiles.ReadFile(path.Join("console", file))
	if err != nil {
		return errNotFound
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
	return nil
}
