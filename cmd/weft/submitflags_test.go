package main

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Priority, run_at and good_until reach the task from the CLI, locally and
// through a server; bad values are usage errors naming the flag.
func TestSubmitScheduleFlags(t *testing.T) {
	t.Parallel()
	hello := filepath.Join("..", "..", "examples", "hello.yaml")
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	token := createKey(t, db, "cli", "tasks:*,workflows:*")
	url, _ := startServe(t, db)

	for _, via := range []struct {
		name string
		args []string
	}{
		{"local", []string{"--db", db}},
		{"server", []string{"--server", url, "--token", token}},
	} {
		t.Run(via.name, func(t *testing.T) {
			before := time.Now()
			r := weftCLI(t, append(via.args, "submit", hello, "--input", `{"name":"Ada"}`, "--priority", "7",
				"--run-at", "1h", "--good-until", "2030-01-02T03:04:05Z")...)
			requireCode(t, 0, r)
			id, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
			require.NoError(t, err, r.stdout)
			r = weftCLI(t, append(via.args, "task", strconv.FormatInt(id, 10), "--json")...)
			requireCode(t, 0, r)
			task := decodeTask(t, r.stdout)
			require.Equal(t, 7, task.Priority)
			require.WithinDuration(t, before.Add(time.Hour), task.RunAt, time.Minute)
			require.NotNil(t, task.GoodUntil)
			require.True(t, task.GoodUntil.Equal(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)), "%v", task.GoodUntil)
		})
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--run-at", "tomorrow"}, `--run-at "tomorrow": want an RFC 3339 time`},
		{[]string{"--run-at", "-5m"}, `--run-at "-5m"`},
		{[]string{"--good-until", "2020-01-01T00:00:00Z"}, "--good-until 2020-01-01T00:00:00Z is in the past"},
		{[]string{"--priority", "2000000"}, "--priority: must be from -1000000 to 1000000"},
	} {
		r := weftCLI(t, append([]string{"--db", db, "submit", hello}, tc.args...)...)
		requireCode(t, 2, r)
		require.Contains(t, r.stderr, tc.want)
	}
}
