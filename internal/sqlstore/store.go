// Package sqlstore is the SQL implementation of store.Store shared by the
// embedded SQLite store and the PostgreSQL store. The backends differ in a
// Dialect (placeholders, row locking in the claim, how namespace caps are
// serialised, arrays, notifications) and in the DB they hand over (database/sql
// or native pgx). Everything that decides state lives here once, so both
// backends behave the same.
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
	// Arrays: the database takes arrays as parameters (unnest), so bulk
	// writes are one statement whatever their size.
	Arrays bool
	// ClaimPlan, if set, runs first in each claim transaction to steer the
	// planner (PostgreSQL's statistics lag behind a freshly filled queue,
	// and with them the claim turns into a scan and sort of every ready
	// step).
	ClaimPlan string
	// LockCap, if set, is a statement taking a transaction-scoped lock on
	// one capped namespace (its argument is the namespace), so that engines
	// count and claim a namespace's running steps one at a time.
	LockCap string
	// Uncancellable runs a write transaction's statements under a context
	// that cannot be cancelled (checked once before it begins), for drivers
	// that pay for each cancellable statement (mattn/go-sqlite3 starts a
	// goroutine per statement). Waits stay bounded by the busy timeout.
	Uncancellable bool
	// Explain prefixes a query to get its plan ("EXPLAIN QUERY PLAN"),
	// whose rows have ExplainColumns columns, the last one the plan line.
	Explain        string
	ExplainColumns int
	// Notify, if set, is a statement that wakes engines in other processes
	// (pg_notify); its argument is NotifyChannel. A transaction that made
	// steps ready runs it, at most once per NotifyEvery: a transaction
	// inside that window leaves it to a notification sent once the window
	// ends, so a busy database is not flooded with them.
	Notify        string
	NotifyChannel string
	NotifyEvery   time.Duration
}

// Config configures a Store.
type Config struct {
	// DB runs reads and write transactions.
	DB DB
	// Aging is how long a ready step waits to gain one priority level.
	Aging time.Duration
	// Clock returns the current time.
	Clock   func() time.Time
	Dialect Dialect
}

// Store is a store.Store on a SQL database.
type Store struct {
	db    DB
	d     Dialect
	aging int64 // microseconds per priority level
	clock func() time.Time
	wake  chan struct{}

	rebound sync.Map // query with ? placeholders -> numbered form

	notifyMu     sync.Mutex
	lastNotify   time.Time
	notifyLater  *time.Timer // armed while a notification waits for its window
	notifyClosed bool
}

// New returns a Store on open database handles whose schema is current.
func New(c Config) *Store {
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Aging <= 0 {
		c.Aging = time.Minute
	}
	return &Store{db: c.DB, d: c.Dialect, aging: c.Aging.Microseconds(), clock: c.Clock,
		wake: make(chan struct{}, 1)}
}

// read runs a query on the readers.
func (s *Store) read(ctx context.Context, q string, args ...any) (Rows, error) {
	return s.db.Query(ctx, s.bind(q), args...)
}

// readRow runs a one-row query on the readers.
func (s *Store) readRow(ctx context.Context, q string, args ...any) Row {
	return s.db.QueryRow(ctx, s.bind(q), args...)
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

var _ store.Store = (*Store)(nil)

// Close closes the database.
func (s *Store) Close() error {
	s.notifyMu.Lock()
	s.notifyClosed = true
	if s.notifyLater != nil {
		s.notifyLater.Stop()
	}
	s.notifyMu.Unlock()
	return s.db.Close()
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

// write runs fn in one write transaction (IMMEDIATE on SQLite).
func (s *Store) write(ctx context.Context, engineID string, fn func(t *txn) error) error {
	if s.d.Uncancellable {
		if err := ctx.Err(); err != nil {
			return err
		}
		ctx = context.WithoutCancel(ctx)
	}
	tx, err := s.db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	t := &txn{ctx: ctx, x: tx, owned: true, s: s, now: s.clock().UnixMicro(), engine: engineID}
	err = t.run(fn)
	if err != nil {
		tx.Rollback(context.WithoutCancel(ctx))
		if t.notifyTaken {
			// The window's notification was to ride on this transaction;
			// send it when the window ends instead, for those that waited.
			s.scheduleNotify()
		}
		return err
	}
	if err = tx.Commit(ctx); err != nil {
		if t.notifyTaken {
			s.scheduleNotify()
		}
		return fmt.Errorf("commit: %w", err)
	}
	if t.readied > 0 {
		s.notify()
	}
	if t.notifyDeferred {
		s.scheduleNotify()
	}
	return nil
}

// takeNotify reports whether a transaction committing now may notify other
// processes itself, and if so starts a new window.
func (s *Store) takeNotify() bool {
	if s.d.NotifyEvery <= 0 {
		return true
	}
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if now := time.Now(); now.Sub(s.lastNotify) >= s.d.NotifyEvery {
		s.lastNotify = now
		return true
	}
	return false
}

// scheduleNotify sends one notification when the current window ends, for
// the committed transactions that made steps ready within it.
func (s *Store) scheduleNotify() {
	s.notifyMu.Lock()
	defer s.notifyMu.Unlock()
	if s.notifyLater != nil || s.notifyClosed {
		return
	}
	s.notifyLater = time.AfterFunc(time.Until(s.lastNotify.Add(s.d.NotifyEvery)), func() {
		s.notifyMu.Lock()
		s.notifyLater = nil
		// A transaction that took a new window since covers the ones that
		// waited: they committed before it did.
		covered := time.Since(s.lastNotify) < s.d.NotifyEvery
		if !covered {
			s.lastNotify = time.Now()
		}
		closed := s.notifyClosed
		s.notifyMu.Unlock()
		if closed || covered {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		tx, err := s.db.Begin(ctx)
		if err != nil {
			return // other processes still poll
		}
		if _, err := tx.Exec(ctx, s.bind(s.d.Notify), s.d.NotifyChannel); err != nil {
			tx.Rollback(ctx)
			return
		}
		_ = tx.Commit(ctx)
	})
}

// within runs fn inside a transaction the caller began and will commit or
// roll back. Engines in this process are woken at once (they find the steps
// when the caller commits); other processes hear the notification, which
// PostgreSQL delivers only on commit.
func (s *Store) within(ctx context.Context, q Querier, fn func(t *txn) error) error {
	t := &txn{ctx: ctx, x: q, s: s, now: s.clock().UnixMicro()}
	if err := t.run(fn); err != nil {
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

func scanWorkflows(rows Rows) ([]store.WorkflowRecord, error) {
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

const stepColumns = `id, task_id, idx, name, handler, namespace, state, sub, deps, attempt, max_attempts, priority, result, error, checkpoint, run_at, engine_id, started_at, finished_at,
	kind, template, item, signal, progress, progress_msg`

// scanStep reads a step; deps holds the dependency indexes, to be named by
// the caller.
func scanStep(sc interface{ Scan(...any) error }) (store.Step, []int, error) {
	var s store.Step
	var st, deps string
	var result, checkpoint sql.NullString
	var runAt, started, finished sql.NullInt64
	var item sql.NullString
	var progress sql.NullFloat64
	err := sc.Scan(&s.ID, &s.TaskID, &s.Index, &s.Name, &s.Handler, &s.Namespace, &st, &s.Sub, &deps, &s.Attempts, &s.MaxAttempts,
		&s.Priority, &result, &s.Error, &checkpoint, &runAt, &s.EngineID, &started, &finished,
		&s.Kind, &s.Template, &item, &s.Signal, &progress, &s.ProgressMessage)
	if err != nil {
		return s, nil, err
	}
	if item.Valid {
		s.Item = json.RawMessage(item.String)
	}
	if progress.Valid {
		s.Progress = &progress.Float64
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
		if _, err := t.exec(`DELETE FROM leaders WHERE engine_id = ?`, engineID); err != nil {
			return fmt.Errorf("stop engine %s: resign: %w", engineID, err)
		}
		return nil
	})
}

// ListEngines returns live engines.
func (s *Store) ListEngines(ctx context.Context) ([]store.EngineInfo, error) {
	rows, err := s.read(ctx, `SELECT id, host, pid, started_at, heartbeat_at,
		EXISTS (SELECT 1 FROM leaders l WHERE l.engine_id = engines.id AND l.expires_at > ?)
		FROM engines WHERE state = 'live' ORDER BY started_at`, s.clock().UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("list engines: %w", err)
	}
	defer rows.Close()
	var out []store.EngineInfo
	for rows.Next() {
		var e store.EngineInfo
		var started, hb int64
		if err := rows.Scan(&e.ID, &e.Host, &e.PID, &started, &hb, &e.Leader); err != nil {
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

// maintenanceRole is the leaders row of the engine that runs maintenance.
const maintenanceRole = "maintenance"

// Lead takes or renews the maintenance lease.
func (s *Store) Lead(ctx context.Context, engineID string, now time.Time, ttl time.Duration) (bool, error) {
	// Engines that do not lead ask often; answer them with a read while
	// another engine's lease runs.
	var holder string
	var expires int64
	err := s.readRow(ctx, `SELECT engine_id, expires_at FROM leaders WHERE role = ?`, maintenanceRole).Scan(&holder, &expires)
	switch {
	case err == nil && holder != engineID && expires > now.UnixMicro():
		return false, nil
	case err != nil && !errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("read leader: %w", err)
	}
	lead := false
	err = s.write(ctx, engineID, func(t *txn) error {
		err := t.queryRow(`INSERT INTO leaders (role, engine_id, expires_at) VALUES (?, ?, ?)
			ON CONFLICT (role) DO UPDATE SET engine_id = excluded.engine_id, expires_at = excluded.expires_at
			WHERE leaders.engine_id = excluded.engine_id OR leaders.expires_at <= ?
			RETURNING engine_id`, maintenanceRole, engineID, now.Add(ttl).UnixMicro(), now.UnixMicro()).Scan(&holder)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return nil // another engine took it first
		case err != nil:
			return fmt.Errorf("take the maintenance lease: %w", err)
		}
		lead = true
		return nil
	})
	return lead, err
}
