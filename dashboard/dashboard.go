// Package dashboard is weft's web dashboard: server-rendered pages (HTML
// templates, inline SVG, a small script, all embedded) over the same engine
// the REST API serves. It reads through the engine; every action the pages
// offer is a call of the page's script to the REST API with the signed-in
// session, so permissions and the audit trail are the API's own.
//
// Mount it with server.Options{UI: dashboard.New}. Pages are a registry
// (pages.go): a new kind of object is one more Page.
package dashboard

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed assets
var assetFS embed.FS

// Page is one page of the dashboard.
type Page struct {
	// Pattern is the page's ServeMux pattern ("GET /tasks/{id}").
	Pattern string
	// Nav, if set, lists the page in the navigation under this name, linked
	// to NavPath.
	Nav, NavPath string
	// Template is the page's file under templates/; it defines "content".
	Template string
	// Route is the API route ("GET /v1/workers") whose data the page
	// shows: the page needs the route's permission, so a key sees no more
	// on the dashboard than the API gives it.
	Route string
	// Live, if set, returns the query of /v1/events whose events refresh
	// the page ("" for none).
	Live func(r *http.Request) string
	// Load reads what the page shows.
	Load func(r *http.Request) (title string, data any, err error)
}

// page is a Page with the permission of its route.
type page struct {
	Page
	perm string
}

// Dashboard serves the pages.
type Dashboard struct {
	srv    *server.Server
	engine *weft.Engine
	log    *slog.Logger
	mux    *http.ServeMux
	pages  []page
	tmpl   map[string]*template.Template
	now    func() time.Time
}

// New returns the dashboard of a server; pass it as server.Options.UI.
func New(srv *server.Server) http.Handler {
	d, err := build(srv)
	if err != nil {
		// The templates are embedded: a parse error is a bug caught by
		// every test.
		panic(err)
	}
	return d
}

func build(srv *server.Server) (*Dashboard, error) {
	d := &Dashboard{srv: srv, engine: srv.Engine(), log: srv.Logger(), mux: http.NewServeMux(), tmpl: map[string]*template.Template{}, now: time.Now}
	perms := map[string]string{}
	for _, rt := range srv.Routes() {
		perms[rt.Method+" "+rt.Path] = rt.Permission
	}
	for _, p := range d.registry() {
		perm := perms[p.Route]
		if perm == "" {
			return nil, fmt.Errorf("dashboard page %s: %q is not an API route that needs a permission", p.Pattern, p.Route)
		}
		d.pages = append(d.pages, page{Page: p, perm: perm})
	}
	base, err := template.New("layout.html").Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/parts.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard templates: %w", err)
	}
	for _, name := range append(pageTemplates(d.pages), "signin.html", "error.html") {
		if _, ok := d.tmpl[name]; ok {
			continue
		}
		t, err := template.Must(base.Clone()).ParseFS(templateFS, "templates/"+name)
		if err != nil {
			return nil, fmt.Errorf("dashboard template %s: %w", name, err)
		}
		d.tmpl[name] = t
	}
	assets, err := fs.Sub(assetFS, "assets")
	if err != nil {
		return nil, err
	}
	static := http.StripPrefix("/assets/", http.FileServerFS(assets))
	d.mux.Handle("GET /assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		static.ServeHTTP(w, r)
	}))
	d.mux.HandleFunc("GET /signin", d.signInPage)
	d.mux.HandleFunc("POST /signin", d.signIn)
	d.mux.HandleFunc("POST /signout", d.signOut)
	for _, p := range d.pages {
		d.mux.Handle(p.Pattern, d.page(p))
	}
	d.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		d.fail(w, r, nil, http.StatusNotFound, "There is no page at "+r.URL.Path+".")
	})
	return d, nil
}

func pageTemplates(pages []page) []string {
	var out []string
	for _, p := range pages {
		out = append(out, p.Template)
	}
	return out
}

// ServeHTTP serves the dashboard, with headers that keep its pages out of
// frames and caches and their scripts to this origin.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'")
	d.mux.ServeHTTP(w, r)
}

// view is what every page template gets.
type view struct {
	Title        string
	Nav          []navItem
	Principal    server.Principal
	AuthDisabled bool
	CSRF         string
	Live         string
	LiveOn       bool
	Path         string
	Data         any
	Message      string
	Status       int
}

type navItem struct {
	Name, Path string
	Active     bool
}

// Can reports whether the signed-in key holds a permission: the page shows
// an action only then.
func (v *view) Can(perm string) bool { return server.Allowed(v.Principal.Permissions, perm) }

func (d *Dashboard) page(p page) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, ok := d.who(w, r)
		if !ok {
			return
		}
		v := d.newView(r, pr)
		// Text no store can hold, in a filter or a path segment, is refused
		// here for every page, as the API's routes refuse it.
		if err := server.CheckURL(r, p.Pattern); err != nil {
			d.render(w, r, "error.html", http.StatusBadRequest, withMessage(v, http.StatusBadRequest, err.Error()))
			return
		}
		if !v.Can(p.perm) {
			d.render(w, r, "error.html", http.StatusForbidden, withMessage(v, http.StatusForbidden, "This key lacks the permission "+p.perm+" that this page needs."))
			return
		}
		r = d.withScoped(r, pr, p.perm)
		title, data, err := p.Load(r)
		if err != nil && r.Context().Err() != nil {
			// The browser went away (a page left while it loaded): no
			// error of the server's, and nobody reads the page.
			d.log.Debug("dashboard page abandoned", "path", r.URL.Path, "error", err)
			return
		}
		if err != nil {
			status := server.ErrorStatus(err)
			var ie inputError
			switch {
			case errors.As(err, &ie):
				status = http.StatusBadRequest
			case errors.Is(err, weft.ErrNotFound):
				status = http.StatusNotFound
			case status >= 500:
				d.log.Error("dashboard page failed", "path", r.URL.Path, "error", err)
			}
			d.render(w, r, "error.html", status, withMessage(v, status, err.Error()))
			return
		}
		v.Title, v.Data = title, data
		if p.Live != nil && v.Can(server.PermTasksRead) {
			v.Live, v.LiveOn = p.Live(r), true
		}
		d.render(w, r, p.Template, http.StatusOK, v)
	})
}

func withMessage(v *view, status int, msg string) *view {
	v.Title, v.Status, v.Message = http.StatusText(status), status, msg
	return v
}

// who authenticates a page request; without a session it sends the browser
// to the sign-in page and reports false.
func (d *Dashboard) who(w http.ResponseWriter, r *http.Request) (server.Principal, bool) {
	p, err := d.srv.Authenticate(r)
	if err == nil {
		return p, true
	}
	if server.ErrorStatus(err) == http.StatusUnauthorized {
		if _, cerr := r.Cookie(server.SessionCookie); cerr == nil {
			// A revoked or unknown key: the session is over.
			d.srv.SignOut(w, r)
		}
		http.Redirect(w, r, "/signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return p, false
	}
	d.fail(w, r, nil, server.ErrorStatus(err), err.Error())
	return p, false
}

func (d *Dashboard) newView(r *http.Request, p server.Principal) *view {
	v := &view{Principal: p, AuthDisabled: d.srv.AuthDisabled(), CSRF: server.CSRFToken(r), Path: r.URL.Path}
	for _, pg := range d.pages {
		if pg.Nav == "" || !server.Allowed(p.Permissions, pg.perm) {
			continue
		}
		active := r.URL.Path == pg.NavPath || (pg.NavPath != "/" && strings.HasPrefix(r.URL.Path, pg.NavPath+"/"))
		v.Nav = append(v.Nav, navItem{Name: pg.Nav, Path: pg.NavPath, Active: active})
	}
	return v
}

// render writes a page, or only its content when the page's script asks
// for a refresh (?fragment=1).
func (d *Dashboard) render(w http.ResponseWriter, r *http.Request, name string, status int, v *view) {
	t := d.tmpl[name]
	root := "layout"
	if r.URL.Query().Get("fragment") == "1" {
		root = "content"
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, root, v); err != nil {
		d.log.Error("dashboard render failed", "template", name, "error", err)
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func (d *Dashboard) fail(w http.ResponseWriter, r *http.Request, p *server.Principal, status int, msg string) {
	v := &view{AuthDisabled: d.srv.AuthDisabled(), Path: r.URL.Path}
	if p == nil {
		if pr, err := d.srv.Authenticate(r); err == nil {
			p = &pr
		}
	}
	if p != nil {
		v = d.newView(r, *p)
	}
	d.render(w, r, "error.html", status, withMessage(v, status, msg))
}

// inputError is a bad query parameter of a page.
type inputError struct{ msg string }

func (e inputError) Error() string { return e.msg }

func badInput(format string, args ...any) error { return inputError{fmt.Sprintf(format, args...)} }

// signInPage shows the form.
func (d *Dashboard) signInPage(w http.ResponseWriter, r *http.Request) {
	if d.srv.AuthDisabled() {
		http.Redirect(w, r, "/", http.StatusSeeOther)
		return
	}
	d.render(w, r, "signin.html", http.StatusOK, &view{Title: "Sign in", Data: signInData{Next: safeNext(r.URL.Query().Get("next"))}})
}

type signInData struct {
	Next, Error string
}

// signIn checks the posted key and starts a session.
func (d *Dashboard) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		d.render(w, r, "signin.html", http.StatusBadRequest, &view{Title: "Sign in", Data: signInData{Error: "The form could not be read."}})
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	if server.CrossSite(r) {
		d.render(w, r, "signin.html", http.StatusForbidden, &view{Title: "Sign in", Data: signInData{Next: next, Error: "Sign-in from another site is refused."}})
		return
	}
	p, err := d.srv.SignIn(w, r, r.PostForm.Get("key"))
	if err != nil {
		status := server.ErrorStatus(err)
		msg := "That key was not accepted."
		if status >= 500 {
			msg = "The key could not be checked: " + err.Error()
		}
		d.render(w, r, "signin.html", status, &view{Title: "Sign in", Data: signInData{Next: next, Error: msg}})
		return
	}
	d.log.Info("dashboard sign-in", "key", p.Name)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (d *Dashboard) signOut(w http.ResponseWriter, r *http.Request) {
	if server.CrossSite(r) {
		http.Error(w, "cross-site sign-out refused", http.StatusForbidden)
		return
	}
	d.srv.SignOut(w, r)
	http.Redirect(w, r, "/signin", http.StatusSeeOther)
}

// safeNext keeps a redirect target on this site: a path of this site, or
// "/". Browsers drop tabs and newlines anywhere in a URL, trim control
// characters and spaces at its ends and read a backslash as a slash, so
// "/\t/evil.example" goes to //evil.example: a target with any of them,
// or with any other control character, is refused outright, and what is
// left must parse as a path with neither scheme nor host.
func safeNext(next string) string {
	if next == "" || next[0] != '/' || strings.ContainsFunc(next, func(r rune) bool {
		return r < 0x20 || r == 0x7f || r == ' ' || r == '\\'
	}) {
		return "/"
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || strings.HasPrefix(u.Path, "//") || strings.HasPrefix(next, "//") {
		return "/"
	}
	return next
}
