package server

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/wire/weftv1"
)

// TestRouteThatForgetsItsScope: a route whose handler says it bounds its
// answer by the scope and did not read it is refused, for every key, and a
// route that declares no scope acts for no key, whatever its namespaces.
func TestRouteThatForgetsItsScope(t *testing.T) {
	t.Parallel()
	s, key := accessServer(t)
	all, scoped := key(PermTasksRead), key(PermTasksRead+"@shop")
	answer := func(rt route, token string) int {
		req := httptest.NewRequest("GET", "/x", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		w := httptest.NewRecorder()
		s.wrap(rt).ServeHTTP(w, req)
		return w.Code
	}
	ok := func(*http.Request) (int, any, error) { return http.StatusOK, map[string]string{}, nil }
	reads := func(r *http.Request) (int, any, error) {
		requestScope(r)
		return http.StatusOK, map[string]string{}, nil
	}
	tests := []struct {
		name        string
		rt          route
		all, scoped int
	}{
		{"handler reads its scope", route{method: "GET", path: "/x", perm: PermTasksRead, scope: byHandler, h: reads}, 200, 200},
		{"handler forgets its scope", route{method: "GET", path: "/x", perm: PermTasksRead, scope: byHandler, h: ok}, 500, 500},
		{"no scope declared", route{method: "GET", path: "/x", perm: PermTasksRead, h: ok}, 500, 500},
		{"everywhere", route{method: "GET", path: "/x", perm: PermTasksRead, scope: everywhere, h: ok}, 200, 403},
	}
	for _, tt := range tests {
		require.Equal(t, tt.all, answer(tt.rt, all), "%s, every namespace", tt.name)
		require.Equal(t, tt.scoped, answer(tt.rt, scoped), "%s, in shop", tt.name)
	}
}

// TestProcedureThatForgetsItsScope: a unary gRPC procedure whose scope its
// handler checks (byHandler) is refused as an internal error when the
// handler answered without reading the scope, as a REST route is
// (TestRouteThatForgetsItsScope): a procedure added later cannot forget
// it.
func TestProcedureThatForgetsItsScope(t *testing.T) {
	t.Parallel()
	s, key := accessServer(t)
	token := key(PermTasksRead + "@shop")
	// A request built here names no procedure: the table gets one for it.
	s.procs[""] = procedure{perm: PermTasksRead, scope: byHandler}
	wrap := (&grpcAccess{s}).WrapUnary
	call := func(next connect.UnaryFunc) error {
		req := connect.NewRequest(&weftv1.ListTasksRequest{})
		req.Header().Set("Authorization", "Bearer "+token)
		_, err := wrap(next)(context.Background(), req)
		return err
	}
	answer := func(context.Context, connect.AnyRequest) (connect.AnyResponse, error) {
		return connect.NewResponse(&weftv1.ListTasksResponse{}), nil
	}
	reads := func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		scopeFrom(ctx)
		return answer(ctx, req)
	}
	require.NoError(t, call(reads), "a handler that reads its scope answers")
	err := call(answer)
	require.Equal(t, connect.CodeInternal, connect.CodeOf(err), "a handler that forgot its scope: %v", err)
}

// accessServer is a server on a fresh SQLite store, and key, which makes
// an API key with perms and returns its token.
func accessServer(t *testing.T) (*Server, func(perms ...string) string) {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	e, err := weft.New(st, weft.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	s, err := New(e, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s, func(perms ...string) string {
		token, k, err := NewAPIKey("k", perms)
		require.NoError(t, err)
		require.NoError(t, st.CreateAPIKey(context.Background(), k))
		return token
	}
}
