package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/store/sqlite"
)

// TestOpenPathWithURICharacters: a file whose name holds characters a URI
// gives a meaning to opens as itself, not as a part of its name.
func TestOpenPathWithURICharacters(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"a#b.db", "what?.db", "100%.db", "mode=ro&x.db"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), name)
			s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
			require.NoError(t, err)
			_, err = s.InsertTasks(context.Background(), []store.TaskInsert{{Namespace: "ns", Workflow: "wf", Version: "1",
				Steps: []store.StepInsert{{Name: "a", Handler: "h", MaxAttempts: 1}}}})
			require.NoError(t, err)
			require.NoError(t, s.Close())
			_, err = os.Stat(path)
			require.NoError(t, err, "the file has the name given")
			ro, err := sqlite.Open(context.Background(), path, sqlite.Options{ReadOnly: true})
			require.NoError(t, err)
			defer ro.Close()
			tasks, err := ro.ListTasks(context.Background(), store.TaskFilter{Limit: 10})
			require.NoError(t, err)
			require.Len(t, tasks, 1)
		})
	}
}
