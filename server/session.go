package server

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/weftrun/weft"
)

// Browser sessions. A person signs in to the dashboard with an API key; the
// server keeps it in an HttpOnly, SameSite=Strict cookie (Secure over TLS)
// and authenticates requests that carry no Authorization header by it, so
// every check of an API key (permissions, revocation) holds for the session
// too, and the audit trail names the key. Requests that change state with
// the cookie must carry the session's CSRF token in the CSRFHeader header,
// and must not come from another origin.
const (
	// SessionCookie holds a signed-in browser's API key.
	SessionCookie = "weft_session"
	// CSRFHeader carries the session's CSRF token (CSRFToken) on every
	// state-changing request authenticated by the session cookie.
	CSRFHeader = "X-Weft-CSRF"
	// SessionTTL is how long a browser keeps a session.
	SessionTTL = 12 * time.Hour
)

// Engine returns the engine the server serves.
func (s *Server) Engine() *weft.Engine { return s.engine }

// AuthDisabled reports that the server serves every request without
// credentials (Options.DisableAuth).
func (s *Server) AuthDisabled() bool { return s.opts.DisableAuth }

// Authenticate returns who made a request: the holder of its bearer
// credential or of its session cookie (anonymous with every permission
// when authentication is disabled). The error is an API error whose status
// is 401 when no accepted credential came with the request.
func (s *Server) Authenticate(r *http.Request) (Principal, error) {
	p, aerr := s.principal(r)
	if aerr != nil {
		return Principal{}, aerr
	}
	return p, nil
}

// Logger is the server's logger (Options.Logger), for the handlers that
// serve beside the API (the dashboard).
func (s *Server) Logger() *slog.Logger { return s.log }

// ErrorStatus returns the HTTP status of an error returned by the server's
// methods (500 for any other error).
func ErrorStatus(err error) int { return toAPIError(err).Status }

// SignIn checks an API key and, when it is accepted, starts a browser
// session with it: the session cookie is set on w.
func (s *Server) SignIn(w http.ResponseWriter, r *http.Request, token string) (Principal, error) {
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, keyPrefix) {
		return Principal{}, errorf(http.StatusUnauthorized, CodeUnauthenticated, "that is not an API key (they begin with %q)", keyPrefix)
	}
	p, aerr := s.auth.apiKey(r.Context(), token)
	if aerr != nil {
		return Principal{}, aerr
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: token, Path: "/", MaxAge: int(SessionTTL / time.Second),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
	return p, nil
}

// SignOut ends a browser session: the cookie is cleared.
func (s *Server) SignOut(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode})
}

// CSRFToken returns the CSRF token of the request's session, "" without
// one. It is derived from the session's key, so it holds across restarts
// and servers and changes with the key.
func CSRFToken(r *http.Request) string {
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return ""
	}
	return csrfFor(c.Value)
}

func csrfFor(token string) string {
	k := sha256.Sum256([]byte(token))
	m := hmac.New(sha256.New, k[:])
	m.Write([]byte("weft dashboard csrf"))
	return hex.EncodeToString(m.Sum(nil))
}

// sessionToken returns the API key of the request's session cookie, if the
// request has no Authorization header of its own.
func sessionToken(r *http.Request) (string, bool) {
	if r.Header.Get("Authorization") != "" {
		return "", false
	}
	c, err := r.Cookie(SessionCookie)
	if err != nil || c.Value == "" {
		return "", false
	}
	return c.Value, true
}

var errCrossSite = errors.New("cross-site request refused")

// checkBrowser guards requests a browser may send without the user's
// intent: a state-changing request authenticated by the session cookie (or
// by nothing, when authentication is disabled) must come from this origin
// and, with a session, carry its CSRF token.
func checkBrowser(r *http.Request, session string) *apiError {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return errorf(http.StatusForbidden, CodeForbidden, "%v (Sec-Fetch-Site: %s)", errCrossSite, site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return errorf(http.StatusForbidden, CodeForbidden, "%v: origin %q is not this server", errCrossSite, o)
		}
	}
	if session == "" {
		return nil
	}
	got := r.Header.Get(CSRFHeader)
	if got == "" || subtle.ConstantTimeCompare([]byte(got), []byte(csrfFor(session))) != 1 {
		return errorf(http.StatusForbidden, CodeForbidden, "a request made with the session cookie needs the session's %s header", CSRFHeader)
	}
	return nil
}
