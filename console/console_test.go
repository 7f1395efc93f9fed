package console

import (
	"net/http/httptest"
	"strings"
	"testing"
)

// The page loads its script from the path the server serves it on, the
// script reads the figures from the server's own endpoints, and both go
// out with a policy that lets them load nothing from elsewhere.
func TestPageAndScript(t *testing.T) {
	for _, c := range []struct {
		serve func(w *httptest.ResponseRecorder)
		typ   string
		want  string
	}{
		{func(w *httptest.ResponseRecorder) { ServePage(w, nil) }, "text/html", `<script src="` + ScriptPath + `">`},
		{func(w *httptest.ResponseRecorder) { ServeScript(w, nil) }, "text/javascript", `get("/console/data")`},
	} {
		w := httptest.NewRecorder()
		c.serve(w)
		h := w.Result().Header
		if !strings.HasPrefix(h.Get("Content-Type"), c.typ) || !strings.Contains(h.Get("Content-Security-Policy"), "default-src 'none'") {
			t.Errorf("%s: headers %v", c.typ, h)
		}
		if !strings.Contains(w.Body.String(), c.want) {
			t.Errorf("%s: no %q in it", c.typ, c.want)
		}
		if strings.Contains(w.Body.String(), "http://") || strings.Contains(w.Body.String(), "https://") {
			t.Errorf("%s: names another origin", c.typ)
		}
	}
}
