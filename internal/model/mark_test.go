package model

import (
	"database/sql"
	"log/slog"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/pgtesting"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/postgres"
	"github.com/weftrun/weft/weftdb"
	wf "github.com/weftrun/weft/workflow"
)

// TestMarkSeesEveryChange checks the state check's marks (checkState
// reads an open task again only when its mark changed): a task's mark,
// from GetTask, is the one ListTasks and openSteps give while it does not
// change, and differs once any step's field that Classify reads changes.
func TestMarkSeesEveryChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) store.Store
	}{
		{"sqlite", func(t *testing.T) store.Store {
			st, err := weftdb.Open(t.Context(), filepath.Join(t.TempDir(), "mark.db"), weftdb.Options{})
			require.NoError(t, err)
			t.Cleanup(func() { st.Close() })
			return st
		}},
		{"postgres", func(t *testing.T) store.Store { return pgtesting.Open(t, postgres.Options{}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testMarkSeesEveryChange(t, tc.open(t))
		})
	}
}

func testMarkSeesEveryChange(t *testing.T, st store.Store) {
	ctx := t.Context()
	eng, err := weft.New(st, weft.Config{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	for name, tpl := range templates("/bin/true", "/dev/null", time.Second) {
		w, err := wf.Parse(name+".yaml", []byte(tpl))
		require.NoError(t, err, name)
		require.NoError(t, eng.Register(ctx, w), name)
	}
	subs := []weft.Submission{{Workflow: "mb/sig"}, {Workflow: "ma/dag"}, {Workflow: "mb/batch"}}
	_, err = eng.SubmitMany(ctx, subs)
	require.NoError(t, err)
	db := st.(interface{ DB() *sql.DB }).DB()
	r := &runner{c: &cluster{st: st, db: db}}

	// current returns each open task's mark as ListTasks and openSteps
	// give it now.
	current := func() map[int64]string {
		open, err := st.ListTasks(ctx, store.TaskFilter{States: []state.Task{state.TaskPending, state.TaskRunning}})
		require.NoError(t, err)
		steps, err := r.openSteps(ctx)
		require.NoError(t, err)
		out := map[int64]string{}
		for _, lt := range open {
			out[lt.ID] = taskMark(&lt) + steps[lt.ID]
		}
		return out
	}
	marks := current()
	require.Len(t, marks, len(subs))
	read := map[int64]*store.Task{}
	for id, m := range marks {
		task, err := st.GetTask(ctx, id)
		require.NoError(t, err)
		require.NotEmpty(t, task.Steps)
		require.Equal(t, m, mark(task), "task %d unchanged", id)
		read[id] = task
	}

	changes := []struct{ name, set string }{
		{"state", `state = CASE WHEN state = 'ready' THEN 'pending' ELSE 'ready' END`},
		{"attempt", `attempt = attempt + 1`},
		{"run_at", `run_at = 1234567`},
		{"run_at cleared", `run_at = NULL`},
	}
	for _, c := range changes {
		for id, task := range read {
			s := task.Steps[len(task.Steps)-1]
			_, err := db.ExecContext(ctx, `UPDATE steps SET `+c.set+` WHERE id = `+itoa(s.ID))
			require.NoError(t, err)
			require.NotEqual(t, mark(task), current()[id], "%s of step %s of task %d changed", c.name, s.Name, id)
			task, err = st.GetTask(ctx, id)
			require.NoError(t, err)
			require.Equal(t, mark(task), current()[id], "task %d read again after its %s changed", id, c.name)
			read[id] = task
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
