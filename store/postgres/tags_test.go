package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
)

// TestTagFilterReadsTagIndex shows that a filter by a rare tag looks it up
// in the task_tags index rather than scanning the tasks.
func TestTagFilterReadsTagIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openIsolated(t, time.Now, time.Minute).(postgres.Store)
	_, err := s.DB().ExecContext(ctx, `INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, remaining)
		SELECT g, 'ns', 'wf', '1', 'completed', '{}', 0, 0, g, 0 FROM generate_series(1, 100000) g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO task_tags (task_id, key, value)
		SELECT id, 'env', CASE WHEN id % 1000 = 0 THEN 'rare' ELSE 'common' END FROM tasks`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE tasks`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE task_tags`)
	require.NoError(t, err)
	plan, err := s.ExplainListTasks(ctx, store.TaskFilter{Tags: map[string]string{"env": "rare"}, Limit: 10})
	require.NoError(t, err)
	require.Contains(t, plan, "task_tags_lookup", plan)
	require.NotContains(t, plan, "Seq Scan on tasks", plan)
	t.Logf("list plan:\n%s", plan)
	tasks, err := s.ListTasks(ctx, store.TaskFilter{Tags: map[string]string{"env": "rare"}, Limit: 200})
	require.NoError(t, err)
	require.Len(t, tasks, 100)
}
