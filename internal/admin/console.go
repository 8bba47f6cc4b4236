package admin

import (
	"bytes"
	"embed"
	"html/template"
	"net/http"
	"path"
	"sync"
)

// The console (docs/admin.md#console): one page, its assets embedded in
// the binary, served by Caddy's admin endpoint and by the
// webhook_idempotency_console handler. It calls the admin API of its own
// origin, at a URL relative to its own, which the page names in its
// webhook-idempotency-api meta tag; the Content-Security-Policy allows
// nothing else: no inline script or style, no other origin, no framing.

//go:embed console
var consoleFiles embed.FS

// consoleAssets are the console's files below console/ and their content
// types; index.html is the page.
var consoleAssets = map[string]string{
	"api.js":      "text/javascript; charset=utf-8",
	"console.js":  "text/javascript; charset=utf-8",
	"console.css": "text/css; charset=utf-8",
	"charts.js":   "text/javascript; charset=utf-8",
	"plot.js":     "text/javascript; charset=utf-8",
	"charts.css":  "text/css; charset=utf-8",
}

// consoleCSP is the console's Content-Security-Policy.
const consoleCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Where the page finds the API, relative to the page's own URL: on the
// admin endpoint the page is /webhook_idempotency/console and the API
// /webhook_idempotency/; in the handler the page is the route's root and
// the API below api/. Relative, so that the page works on whatever host
// and route prefix serves it.
const (
	adminPageAPI   = "./"
	handlerPageAPI = "api/"
)

// consolePages are the page rendered for each API base, once.
var consolePages = sync.OnceValue(func() map[string][]byte {
	t := template.Must(template.ParseFS(consoleFiles, "console/index.html"))
	pages := make(map[string][]byte, 2)
	for _, api := range []string{adminPageAPI, handlerPageAPI} {
		var b bytes.Buffer
		if err := t.Execute(&b, struct{ API string }{api}); err != nil {
			panic("rendering the console's page: " + err.Error())
		}
		pages[api] = b.Bytes()
	}
	return pages
})

// serveConsolePage serves the page, which finds the API at api, relative
// to its own URL.
func serveConsolePage(w http.ResponseWriter, api string) error {
	writeConsoleFile(w, "text/html; charset=utf-8", consolePages()[api])
	return nil
}

// serveConsoleAsset serves one of the page's assets, by its name below
// console/.
func serveConsoleAsset(w http.ResponseWriter, name string) error {
	ctype, ok := consoleAssets[name]
	if !ok {
		return errNotFound
	}
	b, err := consoleFiles.ReadFile(path.Join("console", name))
	if err != nil {
		return errNotFound
	}
	writeConsoleFile(w, ctype, b)
	return nil
}

// writeConsoleFile answers 200 with one of the console's files.
func writeConsoleFile(w http.ResponseWriter, ctype string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Security-Policy", consoleCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	_, _ = w.Write(b)
}
