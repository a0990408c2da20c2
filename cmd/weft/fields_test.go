package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/workflow"
)

// TestSubmitFieldErrors: a submission's priority, tags and on_conflict are
// checked in one place, and every way in names the field at fault: the Go
// API (a *weft.FieldError), REST (400 invalid_field with the field), the
// CLI on the database (exit status 2 naming the flag) and through a server
// (exit status 2 naming the field). Nothing is submitted.
func TestSubmitFieldErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	db := filepath.Join(dir, "weft.db")
	requireCode(t, 0, weftCLI(t, "--db", db, "register", filepath.Join("..", "..", "examples", "hello.yaml")))
	ctx := t.Context()
	st, err := weftdb.Open(ctx, db, weftdb.Options{})
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	quiet := slog.New(slog.DiscardHandler)
	e, err := weft.New(st, weft.Config{Logger: quiet})
	require.NoError(t, err)
	srv, err := server.New(e, server.Options{DisableAuth: true, Logger: quiet})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(apicontract.Serve(t, srv))
	t.Cleanup(hs.Close)

	for _, tc := range []struct {
		field, flag string
		sub         weft.Submission
		body        map[string]any
		cli         []string
	}{
		{field: "priority", flag: "--priority", sub: weft.Submission{Priority: weft.MaxPriority + 1},
			body: map[string]any{"priority": weft.MaxPriority + 1}, cli: []string{"--priority", "1000001"}},
		{field: "priority", flag: "--priority", sub: weft.Submission{Priority: -weft.MaxPriority - 1},
			body: map[string]any{"priority": -weft.MaxPriority - 1}, cli: []string{"--priority", "-1000001"}},
		{field: "tags", flag: "--tag", sub: weft.Submission{Tags: map[string]string{"bad key": "1"}},
			body: map[string]any{"tags": map[string]string{"bad key": "1"}}, cli: []string{"--tag", "bad key=1"}},
		{field: "tags", flag: "--tag", sub: weft.Submission{Tags: map[string]string{"env": ""}},
			body: map[string]any{"tags": map[string]string{"env": ""}}, cli: []string{"--tag", "env="}},
		{field: "on_conflict", flag: "--on-conflict", sub: weft.Submission{Key: "k", OnConflict: workflow.OnConflict("replace")},
			body: map[string]any{"idempotency_key": "k", "on_conflict": "replace"}, cli: []string{"--key", "k", "--on-conflict", "replace"}},
	} {
		t.Run(tc.field, func(t *testing.T) {
			sub := tc.sub
			sub.Workflow = "examples/hello"
			_, err := e.Submit(ctx, sub)
			var fe *weft.FieldError
			require.True(t, errors.As(err, &fe), "Go API: %v", err)
			require.Equal(t, tc.field, fe.Field, "Go API")
			require.ErrorIs(t, err, weft.ErrInvalid, "Go API")

			tc.body["workflow"] = "examples/hello"
			b, err := json.Marshal(tc.body)
			require.NoError(t, err)
			resp, err := http.Post(hs.URL+"/v1/tasks", "application/json", bytes.NewReader(b))
			require.NoError(t, err)
			var apiErr struct {
				Error struct{ Code, Field, Message string }
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&apiErr))
			resp.Body.Close()
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "REST: %+v", apiErr)
			require.Equal(t, server.CodeInvalidField, apiErr.Error.Code, "REST")
			require.Equal(t, tc.field, apiErr.Error.Field, "REST")

			r := weftCLI(t, append([]string{"--db", db, "submit", "examples/hello"}, tc.cli...)...)
			requireCode(t, exitUsage, r)
			require.Contains(t, r.stderr, tc.flag+": ", "CLI")
			r = weftCLI(t, append([]string{"--server", hs.URL, "submit", "examples/hello"}, tc.cli...)...)
			requireCode(t, exitUsage, r)
			require.Contains(t, r.stderr, tc.flag+": ", "CLI through a server names the flag too")
		})
	}
	tasks, err := e.List(ctx, weft.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks, "no invalid submission created a task")
}

// TestFieldErrorsNameWhatTheCommandTakes: whatever field an engine or a
// server refuses, every command's usage error names an argument it
// takes, a flag it has, or the field itself, never a flag it lacks.
func TestFieldErrorsNameWhatTheCommandTakes(t *testing.T) {
	t.Parallel()
	// Every field the store, the workflow checks and the engine refuse
	// (store.Invalidf), with a filter's, a retention's and a JSON path's.
	fields := []string{"actor", "all", "calls", "circuit_breaker", "concurrency", "filter.state", "good_until",
		"idempotency_key", "input", "keep.completed", "key", "name", "older_than", "on_conflict", "preempted",
		"priority", "rate", "reason", "result.a", "schedule", "state", "tags", "target", "types", "url",
		"weight", "workflow"}
	root := newApp(nil, &bytes.Buffer{}, &bytes.Buffer{}, func(string) string { return "" }).rootCommand()
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		for _, field := range fields {
			var xe *exitError
			require.ErrorAs(t, invalidError(cmd, store.Invalidf(field, "is wrong")), &xe)
			require.Equal(t, exitUsage, xe.code)
			msg := xe.err.Error()
			if flag, ok := strings.CutPrefix(msg, "--"); ok {
				flag, _, _ = strings.Cut(flag, ":")
				require.NotNil(t, cmd.Flag(flag), "%q about %s names --%s, which it lacks: %s", cmd.CommandPath(), field, flag, msg)
			}
			require.Contains(t, msg, "is wrong")
		}
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(root)

	find := func(path ...string) *cobra.Command {
		cmd, _, err := root.Find(path)
		require.NoError(t, err)
		return cmd
	}
	for _, tc := range []struct {
		cmd   []string
		field string
		want  string
	}{
		{[]string{"signal"}, "name", `signal name "x y": is wrong`},
		{[]string{"pause"}, "target", `target "x y": is wrong`},
		{[]string{"limit"}, "target", `namespace "x y": is wrong`},
		{[]string{"submit"}, "tags", `--tag: "x y": is wrong`},
		{[]string{"cancel"}, "filter.state", `--state: "x y": is wrong`},
	} {
		var xe *exitError
		require.ErrorAs(t, invalidError(find(tc.cmd...), store.Invalidf(tc.field, "%q: is wrong", "x y")), &xe)
		require.Equal(t, tc.want, xe.err.Error(), "weft %s", tc.cmd)
	}
}
