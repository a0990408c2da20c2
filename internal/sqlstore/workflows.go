package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/store"
)

// This file holds the registered workflow versions.

// PutWorkflow registers a workflow version.
func (s *admin) PutWorkflow(ctx context.Context, w store.WorkflowRecord) (store.WorkflowRecord, bool, error) {
	var created bool
	err := s.write(ctx, "", func(t *transition.Tx) error {
		existing, err := sqltx.ScanWorkflow(t.QueryRow(`SELECT `+sqltx.WorkflowColumns+` FROM workflows WHERE namespace = ? AND name = ? AND version = ?`,
			w.Namespace, w.Name, w.Version))
		switch {
		case err == nil:
			if !sameJSON(string(existing.Definition), w.Definition) {
				return store.Conflictf("workflow %s/%s@%s is already registered with a different definition", w.Namespace, w.Name, w.Version)
			}
			w = existing
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read workflow: %w", err)
		}
		_, err = t.Exec(`INSERT INTO workflows (namespace, name, version, definition, created_at) VALUES (?, ?, ?, ?, ?)`,
			w.Namespace, w.Name, w.Version, string(w.Definition), t.Now)
		if err != nil {
			return fmt.Errorf("insert workflow: %w", err)
		}
		w.CreatedAt, created = time.UnixMicro(t.Now), true
		return nil
	})
	if err != nil {
		return store.WorkflowRecord{}, false, err
	}
	return w, created, nil
}

func sameJSON(a string, b []byte) bool {
	var x, y any
	if json.Unmarshal([]byte(a), &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return string(xb) == string(yb)
}

// GetWorkflow returns one version, or the newest when version is "".
func (s *admin) GetWorkflow(ctx context.Context, namespace, name, version string) (*store.WorkflowRecord, error) {
	rows, err := s.Read(ctx, `SELECT `+sqltx.WorkflowColumns+` FROM workflows
		WHERE namespace = ? AND name = ? AND (? = '' OR version = ?)`, namespace, name, version, version)
	if err != nil {
		return nil, fmt.Errorf("get workflow: %w", err)
	}
	ws, err := sqldb.Collect(rows, sqltx.ScanWorkflow)
	if err != nil {
		return nil, fmt.Errorf("get workflow: %w", err)
	}
	if len(ws) == 0 {
		v := version
		if v == "" {
			v = "any version"
		}
		return nil, fmt.Errorf("workflow %s/%s@%s: %w", namespace, name, v, store.ErrNotFound)
	}
	best := ws[0]
	for _, w := range ws[1:] {
		if store.CompareVersions(w.Version, best.Version) > 0 {
			best = w
		}
	}
	return &best, nil
}

// ListWorkflows returns every registered version.
func (s *admin) ListWorkflows(ctx context.Context) ([]store.WorkflowRecord, error) {
	rows, err := s.Read(ctx, `SELECT `+sqltx.WorkflowColumns+` FROM workflows ORDER BY namespace, name, created_at`)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	ws, err := sqldb.Collect(rows, sqltx.ScanWorkflow)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return ws, nil
}

// WorkflowExists reports whether a version of namespace/name is registered,
// "" matching any namespace or name.
func (s *admin) WorkflowExists(ctx context.Context, namespace, name string) (bool, error) {
	var one int
	err := s.ReadRow(ctx, `SELECT 1 FROM workflows WHERE (? = '' OR namespace = ?) AND (? = '' OR name = ?) LIMIT 1`,
		namespace, namespace, name, name).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look up workflow %s/%s: %w", namespace, name, err)
	}
	return true, nil
}
