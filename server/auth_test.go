package server_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

// concrete fills a route pattern's parameters.
func concrete(path string) string {
	r := strings.NewReplacer("{id}", "1", "{namespace}", "ns", "{name}", "wf", "{version}", "1")
	return r.Replace(path)
}

// TestPermissionMatrix checks every route: no credentials is 401, a key
// with every permission but the one needed is 403, a key with exactly that
// permission (or its resource wildcard) gets past authorization, and public
// routes need nothing.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	for _, rt := range en.srv.Routes() {
		t.Run(rt.Method+" "+rt.Path, func(t *testing.T) {
			path := concrete(rt.Path)
			body := any(nil)
			if rt.Method == "POST" {
				body = "{}"
			}
			if rt.Permission == "" {
				r := en.do(rt.Method, path, "", body)
				require.NotContains(t, []int{401, 403}, r.status, "public route")
				return
			}
			r := en.do(rt.Method, path, "", body)
			require.Equal(t, http.StatusUnauthorized, r.status)
			code, _ := r.errorCode(t)
			require.Equal(t, server.CodeUnauthenticated, code)
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")

			var others []string
			for _, p := range server.Permissions {
				if p != rt.Permission && p != server.PermAdmin {
					others = append(others, p)
				}
			}
			r = en.do(rt.Method, path, en.key(others...), body)
			require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
			code, _ = r.errorCode(t)
			require.Equal(t, server.CodeForbidden, code)

			resource, _, _ := strings.Cut(rt.Permission, ":")
			for _, granted := range []string{rt.Permission, resource + ":*", server.PermAdmin} {
				if rt.Path == "/v1/events" {
					// A stream does not end: read its status alone.
					require.Equal(t, http.StatusOK, en.streamStatus(t, path, en.key(granted)), "with %s", granted)
					continue
				}
				r = en.do(rt.Method, path, en.key(granted), body)
				require.NotContains(t, []int{401, 403}, r.status, "with %s: %s", granted, r.body)
			}
		})
	}
}

func TestAPIKeysRefused(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	en := newEnv(t, backends()["sqlite"](t), server.Options{Logger: log})
	good := en.key(server.PermTasksRead)
	require.Equal(t, 200, en.do("GET", "/v1/tasks", good, nil).status)

	id := strings.Split(good, "_")[1]
	wrongSecret := good[:len(good)-4] + "AAAA"
	if wrongSecret == good {
		wrongSecret = good[:len(good)-4] + "BBBB"
	}
	tests := []struct{ name, header string }{
		{"wrong secret", "Bearer " + wrongSecret},
		{"unknown id", "Bearer weft_0000000000000000_" + strings.Repeat("x", 43)},
		{"malformed key", "Bearer weft_short"},
		{"not bearer", "Basic " + good},
		{"empty bearer", "Bearer "},
		{"token without jwt config", "Bearer eyJhbGciOiJSUzI1NiJ9.e30.sig"},
	}
	for _, tt := range tests {
		req, err := http.NewRequest("GET", en.url+"/v1/tasks", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", tt.header)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, tt.name)
	}
	require.NoError(t, en.st.RevokeAPIKey(context.Background(), id))
	require.Equal(t, http.StatusUnauthorized, en.do("GET", "/v1/tasks", good, nil).status, "a revoked key")

	require.NotContains(t, logs.String(), good[10:], "a key's secret never reaches the log")
	require.NotContains(t, logs.String(), wrongSecret[10:])
	require.Contains(t, logs.String(), "route=\"GET /v1/tasks\"", "requests are logged")
}

func TestDisabledAuthWarns(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	en := newEnv(t, backends()["sqlite"](t), server.Options{DisableAuth: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.Equal(t, 200, en.do("GET", "/v1/tasks", "", nil).status)
	require.Contains(t, logs.String(), "authentication is DISABLED")
}

// jwtIssuer signs test tokens.
type jwtIssuer struct {
	key *rsa.PrivateKey
	kid string
}

func newIssuer(t *testing.T) *jwtIssuer {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	require.NoError(t, err)
	return &jwtIssuer{key: k, kid: "k1"}
}

func (i *jwtIssuer) publicPEM(t *testing.T) []byte {
	der, err := x509.MarshalPKIXPublicKey(&i.key.PublicKey)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func (i *jwtIssuer) jwks() []byte {
	e := big.NewInt(int64(i.key.PublicKey.E)).Bytes()
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{"kty": "RSA", "kid": i.kid, "use": "sig", "alg": "RS256",
		"n": base64.RawURLEncoding.EncodeToString(i.key.PublicKey.N.Bytes()), "e": base64.RawURLEncoding.EncodeToString(e)}}})
	return b
}

func (i *jwtIssuer) sign(t *testing.T, claims jwt.MapClaims) string {
	tok := jwt.NewWithClaims(jwt.SigningMethodRS256, claims)
	tok.Header["kid"] = i.kid
	s, err := tok.SignedString(i.key)
	require.NoError(t, err)
	return s
}

func TestJWT(t *testing.T) {
	t.Parallel()
	iss := newIssuer(t)
	other := newIssuer(t)
	jwksServer := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(iss.jwks())
	}))
	t.Cleanup(jwksServer.Close)
	configs := map[string]server.JWTConfig{
		"public key": {Issuer: "https://id.example", Audience: "weft", PublicKeyPEM: iss.publicPEM(t)},
		"jwks":       {Issuer: "https://id.example", Audience: "weft", JWKSURL: jwksServer.URL},
	}
	for name, cfg := range configs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			en := newEnv(t, backends()["sqlite"](t), server.Options{JWT: &cfg})
			now := time.Now()
			base := func() jwt.MapClaims {
				return jwt.MapClaims{"iss": "https://id.example", "aud": "weft", "sub": "alice", "exp": now.Add(time.Hour).Unix(),
					"permissions": []string{"tasks:read"}}
			}
			with := func(k string, v any) jwt.MapClaims { c := base(); c[k] = v; return c }
			without := func(k string) jwt.MapClaims { c := base(); delete(c, k); return c }
			hs := jwt.NewWithClaims(jwt.SigningMethodHS256, base())
			hsToken, err := hs.SignedString([]byte("secret"))
			require.NoError(t, err)
			tests := []struct {
				name   string
				token  string
				status int
			}{
				{"valid", iss.sign(t, base()), 200},
				{"scope claim", iss.sign(t, with("scope", "tasks:read workflows:read")), 200},
				{"missing permission", iss.sign(t, with("permissions", []string{"workflows:read"})), 403},
				{"wrong issuer", iss.sign(t, with("iss", "https://evil.example")), 401},
				{"wrong audience", iss.sign(t, with("aud", "other")), 401},
				{"expired", iss.sign(t, with("exp", now.Add(-time.Hour).Unix())), 401},
				{"no expiry", iss.sign(t, without("exp")), 401},
				{"another key", other.sign(t, base()), 401},
				{"HS256", hsToken, 401},
				{"garbage", "not-a-token", 401},
			}
			for _, tt := range tests {
				r := en.do("GET", "/v1/tasks", tt.token, nil)
				require.Equal(t, tt.status, r.status, "%s: %s", tt.name, r.body)
				if tt.status == http.StatusUnauthorized {
					// The verifier's reasons (issuer, audience, keys) are
					// the operator's, in the log; the caller learns only
					// that the token was refused.
					var body wire.ErrorBody
					require.NoError(t, json.Unmarshal(r.body, &body))
					require.Equal(t, "token not accepted", body.Error.Message, tt.name)
				}
			}
		})
	}
	t.Run("namespaces claim", func(t *testing.T) {
		t.Parallel()
		cfg := server.JWTConfig{Issuer: "https://id.example", Audience: "weft", PublicKeyPEM: iss.publicPEM(t), NamespacesClaim: "weft_ns"}
		en := newEnv(t, backends()["sqlite"](t), server.Options{JWT: &cfg})
		en.register(scopeTemplate(inNS, "1"))
		en.register(scopeTemplate(outNS, "1"))
		var theirs wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": outNS + "/gate"}, &theirs)
		claims := func(ns any, perms ...string) string {
			c := jwt.MapClaims{"iss": "https://id.example", "aud": "weft", "sub": "alice", "exp": time.Now().Add(time.Hour).Unix(), "permissions": perms}
			if ns != nil {
				c["weft_ns"] = ns
			}
			return iss.sign(t, c)
		}
		path := fmt.Sprintf("/v1/tasks/%d", theirs.ID)
		tests := []struct {
			name   string
			token  string
			status int
		}{
			{"array in scope", claims([]string{outNS}, "tasks:read"), 200},
			{"string of names", claims(inNS+" "+outNS, "tasks:read"), 200},
			{"every namespace", claims("*", "tasks:read"), 200},
			{"out of scope", claims([]string{inNS}, "tasks:read"), 404},
			{"a grant's own scope wins", claims([]string{outNS}, "tasks:read@"+inNS), 404},
			{"no claim", claims(nil, "tasks:read"), 401},
			{"empty claim", claims([]string{}, "tasks:read"), 401},
			{"not names", claims([]any{1}, "tasks:read"), 401},
			{"a bad name", claims([]string{"sh op"}, "tasks:read"), 401},
		}
		for _, tt := range tests {
			r := en.do("GET", path, tt.token, nil)
			require.Equal(t, tt.status, r.status, "%s: %s", tt.name, r.body)
		}
	})
	_, err := server.New(newEnv(t, backends()["sqlite"](t), server.Options{}).e, server.Options{JWT: &server.JWTConfig{Issuer: "x"}})
	require.Error(t, err, "a JWT config without audience and key is refused")
}

// syncBuffer is a bytes.Buffer safe for the server's concurrent logging.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// streamStatus opens a GET stream and returns its status without reading
// the body, which does not end.
func (en *env) streamStatus(t *testing.T, path, token string) int {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", en.url+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	return resp.StatusCode
}

// TestKeyNames: a key's name is the actor of all it does, printed in
// audit trails and terminals: short printable text only.
func TestKeyNames(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"ops":                    true,
		"alice smith":            true,
		"équipe-paiements":       true,
		"":                       false,
		"  ":                     false,
		"evil\nname":             false,
		"red\x1b[31m":            false,
		"bad\xffutf8":            false,
		strings.Repeat("k", 129): false,
	} {
		_, _, err := server.NewAPIKey(name, []string{"tasks:read"})
		require.Equal(t, ok, err == nil, "%q: %v", name, err)
	}
}
