package sqlite_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
)

// TestTagFilterReadsTagIndex shows that a filter by tag looks the tag up in
// the task_tags index rather than scanning the tasks.
func TestTagFilterReadsTagIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	_, err := s.DB().ExecContext(ctx, `WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 100000)
		INSERT INTO tasks (id, namespace, workflow, version, state, input, priority, run_at, created_at, remaining)
		SELECT n, 'ns', 'wf', '1', 'completed', '{}', 0, 0, n, 0 FROM g`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `INSERT INTO task_tags (task_id, key, value)
		SELECT id, 'env', CASE WHEN id % 1000 = 0 THEN 'rare' ELSE 'common' END FROM tasks`)
	require.NoError(t, err)
	_, err = s.DB().ExecContext(ctx, `ANALYZE`)
	require.NoError(t, err)
	plan, err := s.ExplainListTasks(ctx, store.TaskFilter{Tags: map[string]string{"env": "rare"}, Limit: 10})
	require.NoError(t, err)
	require.Contains(t, plan, "task_tags_lookup", plan)
	t.Logf("list plan:\n%s", plan)
	tasks, err := s.ListTasks(ctx, store.TaskFilter{Tags: map[string]string{"env": "rare"}, Limit: 200})
	require.NoError(t, err)
	require.Len(t, tasks, 100)
}
