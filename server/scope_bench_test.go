package server_test

import (
	"fmt"
	"testing"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
)

// BenchmarkGetTaskScoped reads one task through the API with a key for
// every namespace and with a key bound to the task's namespace, which
// looks the task's namespace up first (one indexed read).
func BenchmarkGetTaskScoped(b *testing.B) {
	for _, tc := range []struct{ name, grant string }{{"all", server.PermTasksRead}, {"scoped", server.PermTasksRead + "@" + inNS}} {
		b.Run(tc.name, func(b *testing.B) {
			en := newEnv(b, backends()["sqlite"](b), server.Options{})
			en.register(scopeTemplate(inNS, "1"))
			var task wire.Task
			en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": inNS + "/gate"}, &task)
			key := en.key(tc.grant)
			path := fmt.Sprintf("/v1/tasks/%d", task.ID)
			b.ResetTimer()
			for b.Loop() {
				if r := en.do("GET", path, key, nil); r.status != 200 {
					b.Fatalf("status %d: %s", r.status, r.body)
				}
			}
		})
	}
}
