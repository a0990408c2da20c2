// Package sqlstore is the SQL implementation of store.Store shared by the
// embedded SQLite store and the PostgreSQL store. The backends differ in a
// Dialect: placeholders, row locking in the claim, how namespace caps are
// serialised, and whether statements are cached here. Everything that
// decides state lives here once, so both backends behave the same.
package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// Dialect is what differs between SQL backends.
type Dialect struct {
	// Numbered rewrites the "?" placeholders the queries are written with
	// as $1, $2, … .
	Numbered bool
	// ClaimLock is appended to the query that selects the steps to claim,
	// so that concurrent engines skip each other's rows ("FOR UPDATE SKIP
	// LOCKED"); empty where one writer at a time is guaranteed.
	ClaimLock string
	// LockCap, if set, is a statement taking a transaction-scoped lock on
	// one capped namespace (its argument is the namespace), so that engines
	// count and claim a namespace's running steps one at a time.
	LockCap string
	// CacheStatements prepares hot statements once on the writer
	// connection (for drivers that do not cache them themselves).
	CacheStatements bool
	// Uncancellable runs a write transaction's statements under a context
	// that cannot be cancelled (checked once before it begins), for drivers
	// that pay for each cancellable statement (mattn/go-sqlite3 starts a
	// goroutine per statement). Waits stay bounded by the busy timeout.
	Uncancellable bool
	// Explain prefixes a query to get its plan ("EXPLAIN QUERY PLAN").
	Explain string
	// Notify, if set, is a statement run once in each transaction that made
	// steps ready, so that engines in other processes wake (pg_notify).
	// Its argument is NotifyChannel.
	Notify        string
	NotifyChannel string
}

// Config configures a Store.
type Config struct {
	// Writer runs write transactions; Reader runs reads (it may be Writer).
	Writer, Reader *sql.DB
	// Aging is how long a ready step waits to gain one priority level.
	Aging time.Duration
	// Clock returns the current time.
	Clock   func() time.Time
	Dialect Dialect
}

// Store is a store.Store on a SQL database.
type Store struct {
	w     *sql.DB
	r     *sql.DB
	d     Dialect
	aging int64 // microseconds per priority level
	clock func() time.Time
	wake  chan struct{}

	stmtMu sync.Mutex
	stmts  map[string]*sql.Stmt // prepared on the writer connection

	rebound sync.Map // query with ? placeholders -> numbered form
}

// New returns a Store on open database handles whose schema is current.
func New(c Config) *Store {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Aging <= 0 {
		c.Aging = time.Minute
	}
	return &Store{w: c.Writer, r: c.Reader, d: c.Dialect, aging: c.Aging.Microseconds(), clock: c.Clock,
		wake: make(chan struct{}, 1), stmts: map[string]*sql.Stmt{}}
}

// RecordSchemaVersion, inside a backend's migration transaction, records
// version in weft_schema if the database has none yet, and refuses a
// database whose schema is newer than this weft. insert is the backend's
// INSERT of one version.
func RecordSchemaVersion(ctx context.Context, tx *sql.Tx, version int, insert string) error {
	var v int
	err := tx.QueryRowContext(ctx, `SELECT version FROM weft_schema`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if _, err := tx.ExecContext(ctx, insert, version); err != nil {
			return fmt.Errorf("record schema version: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read schema version: %w", err)
	case v > version:
		return fmt.Errorf("database schema version %d is newer than this weft (%d): upgrade weft", v, version)
	}
	return nil
}

// DB returns the database handle writes go through.
func (s *Store) DB() *sql.DB { return s.w }

// read runs a query on the readers.
func (s *Store) read(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.r.QueryContext(ctx, s.bind(q), args...)
}

// readRow runs a one-row query on the readers.
func (s *Store) readRow(ctx context.Context, q string, args ...any) *sql.Row {
	return s.r.QueryRowContext(ctx, s.bind(q), args...)
}

// bind returns q with the dialect's placeholders.
func (s *Store) bind(q string) string {
	if !s.d.Numbered {
		return q
	}
	if v, ok := s.rebound.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
		} else {
			b.WriteByte(q[i])
		}
	}
	s.rebound.Store(q, b.String())
	return b.String()
}

// maxCachedStatements bounds the statement cache; queries with IN lists of
// many lengths could otherwise grow it without limit.
const maxCachedStatements = 256

// cached returns q prepared on the writer connection, or nil.
func (s *Store) cached(q string) *sql.Stmt {
	if !s.d.CacheStatements {
		return nil
	}
	s.stmtMu.Lock()
	defer s.stmtMu.Unlock()
	return s.stmts[q]
}

// prepare adds statements to the cache. It must not run inside a write
// transaction: it needs the writer connection.
func (s *Store) prepare(ctx context.Context, qs []string) {
	for _, q := range qs {
		if s.cached(q) != nil {
			continue
		}
		st, err := s.w.PrepareContext(ctx, s.bind(q))
		if err != nil {
			continue // the statement runs unprepared, as before
		}
		s.stmtMu.Lock()
		if old, ok := s.stmts[q]; ok {
			old.Close()
		}
		if len(s.stmts) >= maxCachedStatements {
			for k, old := range s.stmts {
				old.Close()
				delete(s.stmts, k)
				break
			}
		}
		s.stmts[q] = st
		s.stmtMu.Unlock()
	}
}

var _ store.Store = (*Store)(nil)

// Close closes the database.
func (s *Store) Close() error {
	s.stmtMu.Lock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	s.stmtMu.Unlock()
	if s.r == s.w {
		return s.w.Close()
	}
	return errors.Join(s.r.Close(), s.w.Close())
}

// Wake receives a value whenever this handle made steps ready.
func (s *Store) Wake() <-chan struct{} { return s.wake }

// Nudge wakes the engine on this handle as if the handle had made steps
// ready itself; backends call it when another process did.
func (s *Store) Nudge() { s.notify() }

func (s *Store) notify() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// write runs fn in one IMMEDIATE transaction on the writer connection.
func (s *Store) write(ctx context.Context, engineID string, fn func(t *txn) error) error {
	if s.d.Uncancellable {
		if err := ctx.Err(); err != nil {
			return err
		}
		ctx = context.WithoutCancel(ctx)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	t := &txn{ctx: ctx, tx: tx, s: s, now: s.clock().UnixMicro(), engine: engineID}
	err = fn(t)
	if err == nil {
		err = t.flushAudit()
	}
	if err == nil && t.readied > 0 && s.d.Notify != "" {
		if _, err = t.exec(s.d.Notify, s.d.NotifyChannel); err != nil {
			err = fmt.Errorf("notify: %w", err)
		}
	}
	if err != nil {
		tx.Rollback()
	} else if err = tx.Commit(); err != nil {
		err = fmt.Errorf("commit: %w", err)
	}
	if len(t.unprepared) > 0 && ctx.Err() == nil {
		s.prepare(ctx, t.unprepared)
	}
	if err != nil {
		return err
	}
	if t.readied > 0 {
		s.notify()
	}
	return nil
}

// PutWorkflow registers a workflow version.
func (s *Store) PutWorkflow(ctx context.Context, w store.WorkflowRecord) error {
	return s.write(ctx, "", func(t *txn) error {
		var def string
		err := t.queryRow(`SELECT definition FROM workflows WHERE namespace = ? AND name = ? AND version = ?`,
			w.Namespace, w.Name, w.Version).Scan(&def)
		switch {
		case err == nil:
			if !sameJSON(def, w.Definition) {
				return fmt.Errorf("workflow %s/%s@%s is already registered with a different definition: %w", w.Namespace, w.Name, w.Version, store.ErrConflict)
			}
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("read workflow: %w", err)
		}
		_, err = t.exec(`INSERT INTO workflows (namespace, name, version, definition, created_at) VALUES (?, ?, ?, ?, ?)`,
			w.Namespace, w.Name, w.Version, string(w.Definition), t.now)
		if err != nil {
			return fmt.Errorf("insert workflow: %w", err)
		}
		return nil
	})
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
func (s *Store) GetWorkflow(ctx context.Context, namespace, name, version string) (*store.WorkflowRecord, error) {
	rows, err := s.read(ctx, `SELECT namespace, name, version, definition, created_at FROM workflows
		WHERE namespace = ? AND name = ? AND (? = '' OR version = ?)`, namespace, name, version, version)
	if err != nil {
		return nil, fmt.Errorf("get workflow: %w", err)
	}
	ws, err := scanWorkflows(rows)
	if err != nil {
		return nil, err
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
func (s *Store) ListWorkflows(ctx context.Context) ([]store.WorkflowRecord, error) {
	rows, err := s.read(ctx, `SELECT namespace, name, version, definition, created_at FROM workflows ORDER BY namespace, name, created_at`)
	if err != nil {
		return nil, fmt.Errorf("list workflows: %w", err)
	}
	return scanWorkflows(rows)
}

func scanWorkflows(rows *sql.Rows) ([]store.WorkflowRecord, error) {
	defer rows.Close()
	var out []store.WorkflowRecord
	for rows.Next() {
		var w store.WorkflowRecord
		var def string
		var at int64
		if err := rows.Scan(&w.Namespace, &w.Name, &w.Version, &def, &at); err != nil {
			return nil, fmt.Errorf("scan workflow: %w", err)
		}
		w.Definition = json.RawMessage(def)
		w.CreatedAt = time.UnixMicro(at)
		out = append(out, w)
	}
	return out, rows.Err()
}

const taskColumns = `id, namespace, workflow, version, state, input, priority, idempotency_key, run_at, good_until, created_at, started_at, finished_at, error`

func scanTask(sc interface{ Scan(...any) error }) (store.Task, error) {
	var t store.Task
	var st, input string
	var key sql.NullString
	var runAt, created int64
	var goodUntil, started, finished sql.NullInt64
	err := sc.Scan(&t.ID, &t.Namespace, &t.Workflow, &t.Version, &st, &input, &t.Priority, &key, &runAt, &goodUntil, &created, &started, &finished, &t.Error)
	if err != nil {
		return t, err
	}
	t.State = state.Task(st)
	t.Input = json.RawMessage(input)
	t.IdempotencyKey = key.String
	t.RunAt = time.UnixMicro(runAt)
	t.GoodUntil = optTime(goodUntil)
	t.CreatedAt = time.UnixMicro(created)
	t.StartedAt = optTime(started)
	t.FinishedAt = optTime(finished)
	return t, nil
}

const stepColumns = `id, task_id, idx, name, handler, namespace, state, sub, deps, attempt, max_attempts, priority, result, error, checkpoint, run_at, engine_id, started_at, finished_at`

// scanStep reads a step; deps holds the dependency indexes, to be named by
// the caller.
func scanStep(sc interface{ Scan(...any) error }) (store.Step, []int, error) {
	var s store.Step
	var st, deps string
	var result, checkpoint sql.NullString
	var runAt, started, finished sql.NullInt64
	err := sc.Scan(&s.ID, &s.TaskID, &s.Index, &s.Name, &s.Handler, &s.Namespace, &st, &s.Sub, &deps, &s.Attempts, &s.MaxAttempts,
		&s.Priority, &result, &s.Error, &checkpoint, &runAt, &s.EngineID, &started, &finished)
	if err != nil {
		return s, nil, err
	}
	s.State = state.Step(st)
	if result.Valid {
		s.Result = json.RawMessage(result.String)
	}
	if checkpoint.Valid {
		s.Checkpoint = json.RawMessage(checkpoint.String)
	}
	s.RunAt = optTime(runAt)
	s.StartedAt = optTime(started)
	s.FinishedAt = optTime(finished)
	return s, parseIdx(deps), nil
}

// GetTask returns a task and its steps.
func (s *Store) GetTask(ctx context.Context, id int64) (*store.Task, error) {
	t, err := scanTask(s.readRow(ctx, `SELECT `+taskColumns+` FROM tasks WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("task %d: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get task %d: %w", id, err)
	}
	rows, err := s.read(ctx, `SELECT `+stepColumns+` FROM steps WHERE task_id = ? ORDER BY idx`, id)
	if err != nil {
		return nil, fmt.Errorf("get steps of task %d: %w", id, err)
	}
	defer rows.Close()
	var deps [][]int
	for rows.Next() {
		st, d, err := scanStep(rows)
		if err != nil {
			return nil, fmt.Errorf("scan step: %w", err)
		}
		t.Steps = append(t.Steps, st)
		deps = append(deps, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("get steps of task %d: %w", id, err)
	}
	for i, d := range deps {
		for _, j := range d {
			if j < len(t.Steps) {
				t.Steps[i].DependsOn = append(t.Steps[i].DependsOn, t.Steps[j].Name)
			}
		}
	}
	return &t, nil
}

// ListTasks returns tasks newest first.
func (s *Store) ListTasks(ctx context.Context, f store.TaskFilter) ([]store.Task, error) {
	var where []string
	var args []any
	if f.Namespace != "" {
		where, args = append(where, "namespace = ?"), append(args, f.Namespace)
	}
	if f.Workflow != "" {
		where, args = append(where, "workflow = ?"), append(args, f.Workflow)
	}
	if f.State != "" {
		where, args = append(where, "state = ?"), append(args, string(f.State))
	}
	if f.BeforeID > 0 {
		where, args = append(where, "id < ?"), append(args, f.BeforeID)
	}
	if !f.CreatedAfter.IsZero() {
		where, args = append(where, "created_at >= ?"), append(args, f.CreatedAfter.UnixMicro())
	}
	if !f.CreatedBefore.IsZero() {
		where, args = append(where, "created_at < ?"), append(args, f.CreatedBefore.UnixMicro())
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 100
	}
	q := `SELECT ` + taskColumns + ` FROM tasks`
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY id DESC LIMIT %d", limit)
	rows, err := s.read(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	defer rows.Close()
	var out []store.Task
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, fmt.Errorf("scan task: %w", err)
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// Audit returns a task's transitions, oldest first.
func (s *Store) Audit(ctx context.Context, taskID int64) ([]store.AuditEntry, error) {
	rows, err := s.read(ctx, `SELECT id, task_id, step, from_state, to_state, at, attempt, engine_id, reason
		FROM audit WHERE task_id = ? ORDER BY id`, taskID)
	if err != nil {
		return nil, fmt.Errorf("audit of task %d: %w", taskID, err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var e store.AuditEntry
		var at int64
		if err := rows.Scan(&e.ID, &e.TaskID, &e.Step, &e.From, &e.To, &at, &e.Attempt, &e.EngineID, &e.Reason); err != nil {
			return nil, fmt.Errorf("scan audit: %w", err)
		}
		e.At = time.UnixMicro(at)
		out = append(out, e)
	}
	return out, rows.Err()
}

// RegisterEngine records a live engine.
func (s *Store) RegisterEngine(ctx context.Context, e store.EngineInfo) error {
	return s.write(ctx, e.ID, func(t *txn) error {
		_, err := t.exec(`INSERT INTO engines (id, host, pid, started_at, heartbeat_at, state) VALUES (?, ?, ?, ?, ?, 'live')`,
			e.ID, e.Host, e.PID, e.StartedAt.UnixMicro(), t.now)
		if err != nil {
			return fmt.Errorf("register engine %s: %w", e.ID, err)
		}
		return nil
	})
}

// StopEngine marks an engine stopped.
func (s *Store) StopEngine(ctx context.Context, engineID string) error {
	return s.write(ctx, engineID, func(t *txn) error {
		_, err := t.exec(`UPDATE engines SET state = 'stopped' WHERE id = ? AND state = 'live'`, engineID)
		if err != nil {
			return fmt.Errorf("stop engine %s: %w", engineID, err)
		}
		return nil
	})
}

// ListEngines returns live engines.
func (s *Store) ListEngines(ctx context.Context) ([]store.EngineInfo, error) {
	rows, err := s.read(ctx, `SELECT id, host, pid, started_at, heartbeat_at FROM engines WHERE state = 'live' ORDER BY started_at`)
	if err != nil {
		return nil, fmt.Errorf("list engines: %w", err)
	}
	defer rows.Close()
	var out []store.EngineInfo
	for rows.Next() {
		var e store.EngineInfo
		var started, hb int64
		if err := rows.Scan(&e.ID, &e.Host, &e.PID, &started, &hb); err != nil {
			return nil, fmt.Errorf("scan engine: %w", err)
		}
		e.StartedAt, e.HeartbeatAt = time.UnixMicro(started), time.UnixMicro(hb)
		out = append(out, e)
	}
	return out, rows.Err()
}

func optTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.UnixMicro(v.Int64)
	return &t
}

func parseIdx(s string) []int {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	out := make([]int, 0, len(parts))
	for _, p := range parts {
		var n int
		for _, c := range p {
			n = n*10 + int(c-'0')
		}
		out = append(out, n)
	}
	return out
}

func formatIdx(v []int) string {
	var b strings.Builder
	for i, n := range v {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, n)
	}
	return b.String()
}
