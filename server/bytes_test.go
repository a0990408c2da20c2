package server_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

// badStrings are JSON string literals that no store can keep: what
// json.Marshal makes of a NUL, and bytes that are not UTF-8.
var badStrings = map[string]string{
	"nul escape": `"a\u0000b"`,
	"not utf8":   "\"a\xff\xfeb\"",
	"surrogate":  `"a\ud800b"`,
}

// TestBadBytesInBodies: a string no store can keep, anywhere in the body of
// any route that takes text or JSON, is 400 invalid_field naming the field,
// the same on both stores (and never reaches the database). A worker's
// complete and fail are the exception: their result and error end the step
// as the engine ends them for its own handlers
// (TestBadBytesOutcomesEndEverywhere).
func TestBadBytesInBodies(t *testing.T) {
	t.Parallel()
	const fence = `{"step_id":1,"attempt":1,"lease_id":"1"}`
	routes := []struct {
		path, body, field string // body has %s where the bad string goes
	}{
		{"/v1/workflows", `{"template":%s}`, "template"},
		{"/v1/workflows/validate", `{"template":"x","filename":%s}`, "filename"},
		{"/v1/tasks", `{"workflow":"api/chain","input":{"n":1,"a":{"b":[%s]}}}`, "input.a.b[0]"},
		{"/v1/tasks", `{"workflow":"api/chain","input":{%s:1}}`, "input.a\uFFFDb"},
		{"/v1/tasks", `{"workflow":"api/chain","idempotency_key":%s}`, "idempotency_key"},
		{"/v1/steps/1/retry", `{"reason":%s}`, "reason"},
		{"/v1/steps/1/resolve", `{"reason":%s}`, "reason"},
		{"/v1/steps/1/complete", `{"result":{"x":%s}}`, "result.x"},
		{"/v1/steps/1/complete", `{"result":1,"reason":%s}`, "reason"},
		{"/v1/workers", `{"name":%s,"handlers":["h"]}`, "name"},
		{"/v1/workers/w1/claim", `{"handlers":[%s]}`, "handlers[0]"},
		{"/v1/workers/w1/checkpoint", `{"fence":` + fence + `,"checkpoint":{"c":%s}}`, "checkpoint.c"},
		{"/v1/workers/w1/progress", `{"fence":` + fence + `,"fraction":0.5,"message":%s}`, "message"},
	}
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{})
		en.register(chainTemplate)
		for _, rt := range routes {
			for name, bad := range badStrings {
				body := strings.Replace(rt.body, "%s", bad, 1)
				r := en.do("POST", rt.path, en.admin, body)
				require.Equal(t, 400, r.status, "%s %s: %s", rt.path, name, r.body)
				code, field := r.errorCode(t)
				require.Equal(t, server.CodeInvalidField, code, "%s %s: %s", rt.path, name, r.body)
				want := rt.field
				if rt.field == "input.a\uFFFDb" && name != "not utf8" {
					want = `input.a` + bad[2:len(bad)-2] + `b`
				}
				require.Equal(t, want, field, "%s %s: %s", rt.path, name, r.body)
			}
		}
		var page taskPage
		en.ok(200, "GET", "/v1/tasks", nil, &page)
		require.Empty(t, page.Tasks, "no bad request created a task")
	})
}
