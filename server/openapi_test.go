package server_test

import (
	"encoding/json"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

// TestOpenAPIMatchesRoutes fails when a route is missing from the OpenAPI
// document, the document describes a route the server does not have, or
// they disagree on a permission.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	r := en.do("GET", "/v1/openapi.json", "", nil)
	require.Equal(t, 200, r.status)
	var doc struct {
		OpenAPI string `json:"openapi"`
		Paths   map[string]map[string]struct {
			Permission string            `json:"x-weft-permission"`
			Security   []json.RawMessage `json:"security"`
			Responses  map[string]any    `json:"responses"`
		} `json:"paths"`
	}
	r.json(t, &doc)
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."), "an OpenAPI 3 document")

	served := map[string]string{}
	for _, rt := range en.srv.Routes() {
		served[strings.ToLower(rt.Method)+" "+rt.Path] = rt.Permission
	}
	documented := map[string]string{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			key := method + " " + path
			documented[key] = op.Permission
			require.NotEmpty(t, op.Responses, "%s documents no responses", key)
			if op.Permission == "" {
				require.NotNil(t, op.Security, "%s has no permission, so it must be marked public (security: [])", key)
			}
		}
	}
	require.Equal(t, sortedKeys(served), sortedKeys(documented), "routes served and routes documented")
	for k, perm := range served {
		require.Equal(t, perm, documented[k], "permission of %s", k)
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
