package server_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
)

// TestBacklogHoldsUnderConcurrency: concurrent submissions against
// --max-backlog accept exactly the limit, never more.
func TestBacklogHoldsUnderConcurrency(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		const limit, clients = 20, 80
		en := newEnv(t, open(t), server.Options{MaxBacklog: limit})
		en.register("namespace: demo\nname: parked\nversion: \"1\"\nsteps:\n  - name: s\n    handler: nobody.serves.this\n")
		var wg sync.WaitGroup
		statuses := make([]int, clients)
		for i := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				statuses[i] = en.do("POST", "/v1/tasks", en.admin, map[string]any{"workflow": "demo/parked"}).status
			}()
		}
		wg.Wait()
		counts := map[int]int{}
		for _, s := range statuses {
			counts[s]++
		}
		require.Equal(t, limit, counts[201], "statuses: %v", counts)
		require.Equal(t, clients-limit, counts[503], "statuses: %v", counts)
	})
}
