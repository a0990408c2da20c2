package server

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/golang-jwt/jwt/v5"

	"github.com/weftrun/weft/store"
)

// Permissions are resource:action. "resource:*" grants every action on a
// resource; "admin:*" grants everything.
const (
	PermWorkflowsRead  = "workflows:read"
	PermWorkflowsWrite = "workflows:write"
	PermTasksCreate    = "tasks:create"
	PermTasksRead      = "tasks:read"
	PermTasksCancel    = "tasks:cancel"
	PermTasksRetry     = "tasks:retry"
	PermTasksSignal    = "tasks:signal"
	PermTasksDelete    = "tasks:delete" // delete and prune tasks, set retention
	PermStepsRead      = "steps:read"
	PermStepsResolve   = "steps:resolve"
	PermWorkersConnect = "workers:connect"
	PermWebhooksRead   = "webhooks:read"
	PermWebhooksWrite  = "webhooks:write"
	PermPoliciesRead   = "policies:read"
	PermPoliciesWrite  = "policies:write"
	PermWorkersRead    = "workers:read" // list engines and remote workers
	PermAdmin          = "admin:*"
)

// Permissions lists every permission a credential may hold, wildcards
// aside.
var Permissions = []string{PermWorkflowsRead, PermWorkflowsWrite, PermTasksCreate, PermTasksRead, PermTasksCancel, PermTasksRetry, PermTasksSignal,
	PermTasksDelete, PermStepsRead, PermStepsResolve, PermWorkersConnect, PermWorkersRead, PermWebhooksRead, PermWebhooksWrite, PermPoliciesRead, PermPoliciesWrite, PermAdmin}

// ValidatePermission checks that p is a known permission or a wildcard on a
// known resource.
func ValidatePermission(p string) error {
	if slices.Contains(Permissions, p) {
		return nil
	}
	res, action, ok := strings.Cut(p, ":")
	if ok && action == "*" {
		for _, known := range Permissions {
			if strings.HasPrefix(known, res+":") {
				return nil
			}
		}
	}
	return fmt.Errorf("unknown permission %q (known: %s, or RESOURCE:*)", p, strings.Join(Permissions, ", "))
}

// Principal is who made a request.
type Principal struct {
	// Name is the API key's name or the token's subject.
	Name string
	// ID identifies the credential: the API key's id or the token's
	// subject. Remote workers belong to it.
	ID string
	// Kind is "api_key", "jwt" or "anonymous" (authentication disabled).
	Kind string
	// Permissions are the credential's grants: a permission, and after
	// "@" the namespaces it holds in ("tasks:read@shop,billing"); without
	// them, every namespace.
	Permissions []string
}

// Scope returns where the principal may use permission perm.
func (p Principal) Scope(perm string) Scope { return ScopeOf(p.Permissions, perm) }

// Reach returns where the principal may use any of its permissions.
func (p Principal) Reach() Scope {
	return scopeWhere(p.Permissions, func(string) bool { return true })
}

// Owner is the principal as the owner of the remote workers it registers:
// "api_key:<key id>", "jwt:<subject>" or "anonymous".
func (p Principal) Owner() string {
	if p.Kind == "" || p.Kind == "anonymous" {
		return "anonymous"
	}
	return p.Kind + ":" + p.ID
}

type principalKey struct{}

// PrincipalFrom returns the principal of an authenticated request.
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// API keys look like weft_<16 hex id>_<43 base64url secret>. The id finds
// the stored key; the secret is compared by its SHA-256 in constant time.
const (
	keyPrefix   = "weft_"
	keyIDLength = 16
)

// maxKeyName bounds a key's name, in bytes.
const maxKeyName = 128

// checkKeyName refuses a key name that is not short printable text: the
// name is the actor of everything done with the key ("api:NAME"), printed
// in audit trails and terminals, where a newline or an escape sequence
// would forge rows or colours.
func checkKeyName(name string) error {
	if len(name) > maxKeyName || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return fmt.Errorf("key name %q: use at most %d bytes of printable text (no control characters)", name, maxKeyName)
	}
	return nil
}

// NewAPIKey makes a key with the given name and grants (permissions, each
// with the namespaces it holds in or none for every namespace; see
// ParseGrant): the record to store and the secret token, which is shown
// once and never stored.
func NewAPIKey(name string, permissions []string) (token string, k store.APIKey, err error) {
	if strings.TrimSpace(name) == "" {
		return "", k, errors.New("a key needs a name")
	}
	if err := checkKeyName(name); err != nil {
		return "", k, err
	}
	if len(permissions) == 0 {
		return "", k, errors.New("a key needs at least one permission")
	}
	for _, p := range permissions {
		if err := ValidateGrant(p); err != nil {
			return "", k, err
		}
	}
	var id [keyIDLength / 2]byte
	var secret [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", k, fmt.Errorf("random key id: %w", err)
	}
	if _, err := rand.Read(secret[:]); err != nil {
		return "", k, fmt.Errorf("random key secret: %w", err)
	}
	sec := base64.RawURLEncoding.EncodeToString(secret[:])
	h := sha256.Sum256([]byte(sec))
	k = store.APIKey{ID: hex.EncodeToString(id[:]), Name: name, Hash: h[:], Permissions: permissions}
	return keyPrefix + k.ID + "_" + sec, k, nil
}

// parseAPIKey splits a token into key id and secret.
func parseAPIKey(token string) (id, secret string, ok bool) {
	rest, found := strings.CutPrefix(token, keyPrefix)
	if !found || len(rest) < keyIDLength+2 || rest[keyIDLength] != '_' {
		return "", "", false
	}
	return rest[:keyIDLength], rest[keyIDLength+1:], true
}

// authenticator checks credentials: API keys in the store and, when
// configured, JWTs.
type authenticator struct {
	store store.Credentials
	jwt   *jwtVerifier
}

var errNoCredentials = errors.New("no credentials: send Authorization: Bearer with an API key or a token")

// dummyHash is compared when a key id is unknown, so that the answer takes
// as long as for a known id.
var dummyHash = sha256.Sum256([]byte("weft: no such key"))

func (a *authenticator) authenticate(r *http.Request) (Principal, *apiError) {
	return a.bearer(r.Context(), r.Header.Get("Authorization"))
}

// bearer authenticates the value of an Authorization header (REST) or
// authorization metadata (gRPC): "Bearer " and an API key or a JWT.
func (a *authenticator) bearer(ctx context.Context, h string) (Principal, *apiError) {
	scheme, token, _ := strings.Cut(h, " ")
	token = strings.TrimSpace(token)
	if h == "" {
		return Principal{}, &apiError{Status: http.StatusUnauthorized, Code: CodeUnauthenticated, Message: errNoCredentials.Error()}
	}
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return Principal{}, errorf(http.StatusUnauthorized, CodeUnauthenticated, "the Authorization header must be \"Bearer <api key or token>\"")
	}
	if strings.HasPrefix(token, keyPrefix) {
		return a.apiKey(ctx, token)
	}
	if a.jwt == nil {
		return Principal{}, errorf(http.StatusUnauthorized, CodeUnauthenticated, "the credential is not an API key, and this server accepts no tokens")
	}
	p, err := a.jwt.verify(ctx, token)
	if err != nil {
		// Why is the operator's to read in the log, not the caller's:
		// the verifier's reasons say how the server is configured.
		refused := errorf(http.StatusUnauthorized, CodeUnauthenticated, "token not accepted")
		refused.cause = err
		return Principal{}, refused
	}
	return p, nil
}

func (a *authenticator) apiKey(ctx context.Context, token string) (Principal, *apiError) {
	refused := errorf(http.StatusUnauthorized, CodeUnauthenticated, "API key not accepted")
	id, secret, ok := parseAPIKey(token)
	if !ok {
		return Principal{}, refused
	}
	got := sha256.Sum256([]byte(secret))
	k, err := a.store.GetAPIKey(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		subtle.ConstantTimeCompare(got[:], dummyHash[:])
		return Principal{}, refused
	case err != nil:
		return Principal{}, toAPIError(fmt.Errorf("look up api key: %w", err))
	}
	if subtle.ConstantTimeCompare(got[:], k.Hash) != 1 || k.RevokedAt != nil {
		return Principal{}, refused
	}
	return keyPrincipal(k), nil
}

func keyPrincipal(k *store.APIKey) Principal {
	return Principal{Name: k.Name, ID: k.ID, Kind: "api_key", Permissions: k.Permissions}
}

// session authenticates a browser session's secret: the session must be
// recorded and unexpired, and its key not revoked (one read).
func (a *authenticator) session(ctx context.Context, secret string) (Principal, *apiError) {
	refused := errorf(http.StatusUnauthorized, CodeUnauthenticated, "the session has ended: sign in again")
	if !strings.HasPrefix(secret, sessionPrefix) {
		return Principal{}, refused
	}
	ses, err := a.store.GetSession(ctx, sessionID(secret))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Principal{}, refused
	case err != nil:
		return Principal{}, toAPIError(fmt.Errorf("look up session: %w", err))
	}
	if ses.Key.RevokedAt != nil {
		return Principal{}, refused
	}
	return keyPrincipal(ses.Key), nil
}

// JWTConfig configures bearer tokens: RS256-signed JWTs whose issuer and
// audience must match. The signing key is PublicKeyPEM or, when that is
// empty, the keys served at JWKSURL.
type JWTConfig struct {
	Issuer       string
	Audience     string
	PublicKeyPEM []byte
	JWKSURL      string
	// HTTPClient fetches the JWKS; default: a client with a 10s timeout.
	HTTPClient *http.Client
	// Leeway tolerates clock skew in exp and nbf; default 30s.
	Leeway time.Duration
	// NamespacesClaim, when set, names the claim (an array of strings, or
	// one string of names separated by spaces or commas) that gives the
	// namespaces where the token's grants without "@" hold; "*" is every
	// namespace. A token without the claim is not accepted. Unset, such
	// grants hold in every namespace.
	NamespacesClaim string
}

type jwtVerifier struct {
	cfg    JWTConfig
	static *rsa.PublicKey
	jwks   *jwks
	parser *jwt.Parser
}

func newJWTVerifier(cfg JWTConfig) (*jwtVerifier, error) {
	if cfg.Issuer == "" || cfg.Audience == "" {
		return nil, errors.New("jwt: issuer and audience are required")
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = 30 * time.Second
	}
	v := &jwtVerifier{cfg: cfg, parser: jwt.NewParser(jwt.WithValidMethods([]string{"RS256"}), jwt.WithIssuer(cfg.Issuer),
		jwt.WithAudience(cfg.Audience), jwt.WithExpirationRequired(), jwt.WithLeeway(cfg.Leeway))}
	switch {
	case len(cfg.PublicKeyPEM) > 0:
		k, err := jwt.ParseRSAPublicKeyFromPEM(cfg.PublicKeyPEM)
		if err != nil {
			return nil, fmt.Errorf("jwt: public key: %w", err)
		}
		v.static = k
	case cfg.JWKSURL != "":
		client := cfg.HTTPClient
		if client == nil {
			client = &http.Client{Timeout: 10 * time.Second}
		}
		v.jwks = newJWKS(cfg.JWKSURL, client)
	default:
		return nil, errors.New("jwt: a public key or a JWKS URL is required")
	}
	return v, nil
}

func (v *jwtVerifier) verify(ctx context.Context, token string) (Principal, error) {
	claims := jwt.MapClaims{}
	_, err := v.parser.ParseWithClaims(token, claims, func(t *jwt.Token) (any, error) {
		if v.static != nil {
			return v.static, nil
		}
		kid, _ := t.Header["kid"].(string)
		return v.jwks.key(ctx, kid)
	})
	if err != nil {
		return Principal{}, err
	}
	sub, _ := claims["sub"].(string)
	perms := claimPermissions(claims)
	if name := v.cfg.NamespacesClaim; name != "" {
		nss, err := claimNames(claims, name)
		if err != nil {
			return Principal{}, err
		}
		if perms, err = ScopeGrants(perms, nss); err != nil {
			return Principal{}, fmt.Errorf("claim %q: %w", name, err)
		}
	}
	return Principal{Name: sub, ID: sub, Kind: "jwt", Permissions: perms}, nil
}

// claimNames reads a claim of names: an array of strings, or one string
// of names separated by spaces or commas. A missing or empty claim is an
// error: it would scope nothing.
func claimNames(c jwt.MapClaims, name string) ([]string, error) {
	var out []string
	switch v := c[name].(type) {
	case nil:
		return nil, fmt.Errorf("no claim %q (the namespaces of the token's permissions)", name)
	case string:
		out = strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' })
	case []any:
		for _, e := range v {
			s, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("claim %q: %v is not a string", name, e)
			}
			out = append(out, s)
		}
	default:
		return nil, fmt.Errorf("claim %q: want an array of strings or a string, got %T", name, v)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("claim %q names no namespace", name)
	}
	return out, nil
}

// claimPermissions reads permissions from the "permissions" claim (an array
// of strings) and the "scope" claim (space-separated).
func claimPermissions(c jwt.MapClaims) []string {
	var out []string
	if list, ok := c["permissions"].([]any); ok {
		for _, p := range list {
			if s, ok := p.(string); ok {
				out = append(out, s)
			}
		}
	}
	if scope, ok := c["scope"].(string); ok {
		out = append(out, strings.Fields(scope)...)
	}
	return out
}
