package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math/big"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
)

// intField is an integer field of a request body in openapi.json.
type intField struct {
	method, path string
	field        string // as in "fence.step_id", "ids[]"
	maximum      string // "" when openapi.json gives none
}

// requestIntFields lists every integer field of every request body schema
// in openapi.json.
func requestIntFields(t *testing.T) []intField {
	t.Helper()
	data, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	require.NoError(t, dec.Decode(&doc))
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var out []intField
	var walk func(method, path, field string, s map[string]any, seen map[string]bool)
	walk = func(method, path, field string, s map[string]any, seen map[string]bool) {
		if ref, ok := s["$ref"].(string); ok {
			name := ref[strings.LastIndexByte(ref, '/')+1:]
			if seen[name] {
				return
			}
			next := map[string]bool{name: true}
			for k := range seen {
				next[k] = true
			}
			walk(method, path, field, schemas[name].(map[string]any), next)
			return
		}
		if s["type"] == "integer" {
			f := intField{method: method, path: path, field: field}
			if m, ok := s["maximum"].(json.Number); ok {
				f.maximum = m.String()
			}
			out = append(out, f)
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for k, v := range props {
				walk(method, path, strings.TrimPrefix(field+"."+k, "."), v.(map[string]any), seen)
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(method, path, field+"[]", items, seen)
		}
	}
	for path, item := range doc["paths"].(map[string]any) {
		for method, op := range item.(map[string]any) {
			body, ok := op.(map[string]any)["requestBody"].(map[string]any)
			if !ok {
				continue
			}
			schema := body["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
			walk(strings.ToUpper(method), path, "", schema, map[string]bool{})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].method+out[i].path+out[i].field < out[j].method+out[j].path+out[j].field
	})
	require.NotEmpty(t, out)
	return out
}

// TestIntegerBoundsEveryRequestField: every integer field of every request
// body has a maximum in openapi.json; one above it is 400 invalid_field
// naming the field, and so is 2^31 where it is above it; neither is ever a
// 500, and both stores answer alike.
func TestIntegerBoundsEveryRequestField(t *testing.T) {
	t.Parallel()
	fence := `{"step_id": 1, "attempt": 1, "lease_id": "1"}`
	// The body each field is sent in: otherwise valid, with @N@ where the
	// number goes.
	bodies := map[string]string{
		"POST /v1/tasks priority":                          `{"workflow": "t/w", "priority": @N@}`,
		"POST /v1/tasks/batch tasks[].priority":            `{"tasks": [{"workflow": "t/w", "priority": @N@}]}`,
		"POST /v1/workers/{id}/claim max":                  `{"handlers": ["h"], "max": @N@}`,
		"POST /v1/workers/{id}/claim wait_ms":              `{"handlers": ["h"], "wait_ms": @N@}`,
		"POST /v1/workers/{id}/heartbeat steps[].step_id":  `{"steps": [{"step_id": @N@, "attempt": 1, "lease_id": "1"}]}`,
		"POST /v1/workers/{id}/heartbeat steps[].attempt":  `{"steps": [{"step_id": 1, "attempt": @N@, "lease_id": "1"}]}`,
		"POST /v1/workers/{id}/heartbeat free":             `{"free": @N@}`,
		"POST /v1/workers/{id}/fail retry_after_ms":        `{"fence": ` + fence + `, "error": "e", "retry_after_ms": @N@}`,
		"POST /v1/workers/{id}/fail snooze_ms":             `{"fence": ` + fence + `, "error": "e", "snooze_ms": @N@}`,
		"POST /v1/workers/{id}/calls calls[].sleep_ms":     `{"fence": ` + fence + `, "calls": [{"name": "s", "kind": "sleep", "sleep_ms": @N@}]}`,
		"POST /v1/workers/{id}/calls calls[].timeout_ms":   `{"fence": ` + fence + `, "calls": [{"name": "s", "kind": "step", "timeout_ms": @N@}]}`,
		"POST /v1/workers/{id}/calls calls[].max_attempts": `{"fence": ` + fence + `, "calls": [{"name": "s", "kind": "step", "max_attempts": @N@}]}`,
		"POST /v1/workers/{id}/calls calls[].priority":     `{"fence": ` + fence + `, "calls": [{"name": "s", "kind": "step", "priority": @N@}]}`,
		"POST /v1/policies concurrency":                    `{"target": "ns", "concurrency": @N@}`,
		"POST /v1/policies weight":                         `{"target": "ns", "weight": @N@}`,
		"POST /v1/tasks/cancel ids[]":                      `{"ids": [@N@]}`,
		"POST /v1/tasks/retry ids[]":                       `{"ids": [@N@]}`,
		"POST /v1/tasks/delete ids[]":                      `{"ids": [@N@]}`,
		"POST /v1/tasks/cancel cursor":                     `{"filter": {"state": "failed"}, "cursor": @N@}`,
		"POST /v1/tasks/retry cursor":                      `{"filter": {"state": "failed"}, "cursor": @N@}`,
		"POST /v1/tasks/delete cursor":                     `{"filter": {"state": "failed"}, "cursor": @N@}`,
		"POST /v1/tasks/prune cursor":                      `{"state": "failed", "older_than": "1h", "cursor": @N@}`,
	}
	for _, route := range []string{"complete", "fail", "checkpoint", "progress", "calls"} {
		rest := map[string]string{"complete": `"result": {}`, "fail": `"error": "e"`, "checkpoint": `"checkpoint": {}`, "progress": `"fraction": 0.5`,
			"calls": `"calls": [{"name": "s", "kind": "sleep", "sleep_ms": 1}]`}[route]
		bodies["POST /v1/workers/{id}/"+route+" fence.step_id"] = `{"fence": {"step_id": @N@, "attempt": 1, "lease_id": "1"}, ` + rest + `}`
		bodies["POST /v1/workers/{id}/"+route+" fence.attempt"] = `{"fence": {"step_id": 1, "attempt": @N@, "lease_id": "1"}, ` + rest + `}`
	}
	fields := requestIntFields(t)
	type answer struct {
		status      int
		code, field string
	}
	answers := map[string]map[string]answer{} // store → case → answer
	for name, open := range backends() {
		en := newEnv(t, open(t), server.Options{})
		got := map[string]answer{}
		for _, f := range fields {
			key := f.method + " " + f.path + " " + f.field
			require.NotEmpty(t, f.maximum, "%s has no maximum in openapi.json", key)
			body, ok := bodies[key]
			require.True(t, ok, "no test body for %s: add one", key)
			max, ok := new(big.Int).SetString(f.maximum, 10)
			require.True(t, ok, key)
			above := new(big.Int).Add(max, big.NewInt(1))
			two31 := new(big.Int).Lsh(big.NewInt(1), 31)
			last := f.field[strings.LastIndexAny(f.field, ".]")+1:]
			if last == "" {
				last = strings.TrimSuffix(f.field, "[]")
			}
			for _, n := range []*big.Int{above, two31} {
				r := en.do(f.method, fill(f.path, nil), en.admin, strings.ReplaceAll(body, "@N@", n.String()))
				what := name + ": " + key + " = " + n.String()
				require.NotEqual(t, 500, r.status, "%s: %s", what, r.body)
				a := answer{status: r.status}
				if r.status >= 400 {
					a.code, a.field = r.errorCode(t)
				}
				if n.Cmp(max) > 0 {
					require.Equal(t, 400, r.status, "%s: %s", what, r.body)
					require.Equal(t, server.CodeInvalidField, a.code, "%s: %s", what, r.body)
					require.Contains(t, a.field, last, "%s: %s", what, r.body)
				}
				got[key+" = "+n.String()] = a
			}
		}
		answers[name] = got

		// The Go API refuses what REST refuses, by the same check.
		for _, n := range []int{store.MaxConcurrency + 1, -1} {
			_, err := en.e.SetLimits(context.Background(), "ns", weft.Limits{Concurrency: &n}, weft.Operator{Actor: "test"})
			require.ErrorIs(t, err, weft.ErrInvalid, "%s: Go API concurrency %d", name, n)
		}
		for _, n := range []int{store.MaxWeight + 1, -1} {
			_, err := en.e.SetLimits(context.Background(), "ns", weft.Limits{Weight: &n}, weft.Operator{Actor: "test"})
			require.ErrorIs(t, err, weft.ErrInvalid, "%s: Go API weight %d", name, n)
		}
	}
	require.Equal(t, answers["sqlite"], answers["postgres"], "both stores answer alike")
}
