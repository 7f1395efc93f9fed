// Package console is the admin listener's live console: one page, embedded
// in the binary (no build step, no CDN), that reads the server's figures
// once a second — GET /console/data (metrics.Live), and on a gateway
// GET /cluster and GET /campaigns — and draws the run as it goes:
// connections, requests and money a second, latency by request type, the
// rings, the journal, campaigns and, in a cluster, each gateway and each
// SET's owner with the moves in flight. The page holds no figure itself,
// so it is served without a token; its requests carry the one given in the
// page's address (#token=…), kept in the tab's session storage: the read
// token is enough.
package console

import (
	_ "embed"
	"net/http"
)

//go:embed console.html
var page []byte

//go:embed console.js
var script []byte

// Paths are the console's: the page and its script.
const (
	PagePath   = "/console"
	ScriptPath = "/console/console.js"
)

// ServePage writes the page.
func ServePage(w http.ResponseWriter, _ *http.Request) {
	serve(w, "text/html; charset=utf-8", page)
}

// ServeScript writes the page's script.
func ServeScript(w http.ResponseWriter, _ *http.Request) {
	serve(w, "text/javascript; charset=utf-8", script)
}

func serve(w http.ResponseWriter, typ string, b []byte) {
	h := w.Header()
	h.Set("Content-Type", typ)
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Content-Type-Options", "nosniff")
	// Nothing but this server's own script and data; inline styles only.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	w.Write(b)
}
