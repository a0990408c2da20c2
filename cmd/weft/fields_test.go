package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/apicontract"
	"github.com/weftrun/weft/server"
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
