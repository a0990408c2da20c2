package server

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
)

// Browser sessions. A person signs in to the dashboard with an API key; the
// server records a session for that key and gives the browser the
// session's random secret in an HttpOnly, SameSite=Strict cookie, Secure
// when the request arrived over TLS (natively, or through a trusted proxy).
// The store keeps only the secret's SHA-256. A request that carries no
// Authorization header is authenticated by its session: the session must
// exist and not have expired, and its key must not be revoked, so signing
// out (which deletes the session) and revoking the key end it at once, on
// every server of the database. The audit trail names the key. Requests
// that change state with the cookie must carry the session's CSRF token in
// the CSRFHeader header, and must not come from another origin.
const (
	// SessionCookie holds a signed-in browser's session secret.
	SessionCookie = "weft_session"
	// CSRFHeader carries the session's CSRF token (CSRFToken) on every
	// state-changing request authenticated by the session cookie.
	CSRFHeader = "X-Weft-CSRF"
	// SessionTTL is how long a session lasts.
	SessionTTL = 12 * time.Hour
	// sessionPrefix begins a session secret, so that it is never taken
	// for an API key.
	sessionPrefix = "wses_"
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
// session for it: the session is recorded and its cookie set on w.
func (s *Server) SignIn(w http.ResponseWriter, r *http.Request, token string) (Principal, error) {
	token = strings.TrimSpace(token)
	if !strings.HasPrefix(token, keyPrefix) {
		return Principal{}, errorf(http.StatusUnauthorized, CodeUnauthenticated, "that is not an API key (they begin with %q)", keyPrefix)
	}
	p, aerr := s.auth.apiKey(r.Context(), token)
	if aerr != nil {
		return Principal{}, aerr
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Principal{}, fmt.Errorf("make a session secret: %w", err)
	}
	secret := sessionPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	ses := store.Session{ID: sessionID(secret), KeyID: p.ID, ExpiresAt: time.Now().Add(SessionTTL)}
	if err := s.auth.store.CreateSession(r.Context(), ses); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			// Revoked between the check and the session.
			return Principal{}, errorf(http.StatusUnauthorized, CodeUnauthenticated, "API key not accepted")
		}
		return Principal{}, fmt.Errorf("start a session: %w", err)
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: secret, Path: "/", MaxAge: int(SessionTTL / time.Second),
		HttpOnly: true, Secure: s.overTLS(r), SameSite: http.SameSiteStrictMode})
	return p, nil
}

// SignOut ends a browser session: the session is deleted, so its cookie
// signs nobody in even if a copy of it survives, and the cookie is cleared.
func (s *Server) SignOut(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(SessionCookie); err == nil && strings.HasPrefix(c.Value, sessionPrefix) {
		if err := s.auth.store.DeleteSession(r.Context(), sessionID(c.Value)); err != nil {
			s.log.Error("sign-out: delete session", "error", err)
		}
	}
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: s.overTLS(r), SameSite: http.SameSiteStrictMode})
}

// overTLS reports that the request reached the client's end over TLS: its
// own connection is TLS, or a trusted proxy says the client used https.
func (s *Server) overTLS(r *http.Request) bool {
	if r.TLS != nil {
		return true
	}
	if len(s.opts.TrustedProxies) == 0 || !strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return false
	}
	ap, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	addr := ap.Addr().Unmap()
	for _, p := range s.opts.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// sessionID is the stored id of a session secret.
func sessionID(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// CSRFToken returns the CSRF token of the request's session, "" without
// one. It is derived from the session's secret, so it holds across
// restarts and servers and changes with each sign-in.
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

// sessionToken returns the secret of the request's session cookie, if the
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

// CrossSite reports whether a browser sent r from another site (its
// Sec-Fetch-Site, or its Origin naming another host): the one check of
// every state-changing request a page may make, the dashboard's sign-in
// and sign-out included.
func CrossSite(r *http.Request) bool { return crossSite(r) != nil }

// crossSite is the answer that refuses r, sent from another site; nil
// for a request of this site.
func crossSite(r *http.Request) *apiError {
	if site := r.Header.Get("Sec-Fetch-Site"); site == "cross-site" || site == "same-site" {
		return errorf(http.StatusForbidden, CodeForbidden, "%v (Sec-Fetch-Site: %s)", errCrossSite, site)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || !strings.EqualFold(u.Host, r.Host) {
			return errorf(http.StatusForbidden, CodeForbidden, "%v: origin %q is not this server", errCrossSite, o)
		}
	}
	return nil
}

// checkBrowser guards requests a browser may send without the user's
// intent: a state-changing request authenticated by the session cookie (or
// by nothing, when authentication is disabled) must come from this origin
// and, with a session, carry its CSRF token.
func checkBrowser(r *http.Request, session string) *apiError {
	switch r.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if aerr := crossSite(r); aerr != nil {
		return aerr
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
