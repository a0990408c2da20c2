package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// OldKeys are API keys as a schema before namespace scopes held them (id,
// name, permissions), for a store's migration test to insert before it
// opens the store; KeyScopesMigrated checks what the migration made of
// them.
var OldKeys = [][3]string{{"a", "ci", "tasks:create,tasks:read"}, {"b", "ops", "admin:*"}, {"c", "none", ""}}

// KeyScopesMigrated checks, on store s opened over OldKeys, that keys made
// before namespace scopes hold in every namespace, as they did, and say
// so; and that a key made after keeps its grants' namespaces.
func KeyScopesMigrated(t *testing.T, s store.Store) {
	t.Helper()
	ctx := context.Background()
	keys, err := s.ListAPIKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.Equal(t, []string{"tasks:create@*", "tasks:read@*"}, keys[0].Permissions)
	require.Equal(t, []string{"admin:*@*"}, keys[1].Permissions)
	require.Empty(t, keys[2].Permissions)

	require.NoError(t, s.CreateAPIKey(ctx, store.APIKey{ID: "d", Name: "shop", Hash: []byte{1},
		Permissions: []string{"tasks:read@shop,billing", "workers:connect@shop"}}))
	k, err := s.GetAPIKey(ctx, "d")
	require.NoError(t, err)
	require.Equal(t, []string{"tasks:read@shop,billing", "workers:connect@shop"}, k.Permissions, "a grant's namespaces survive the store")
}
