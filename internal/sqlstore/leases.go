package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/internal/sqlstore/transition"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the membership of engines and the leases on their work:
// registration, heartbeats, the maintenance leader's lease, the release of
// claims their engine never received, and the reaping of lapsed engines.

// RegisterEngine records a live engine.
func (s *maintenance) RegisterEngine(ctx context.Context, e store.EngineInfo) error {
	return s.write(ctx, e.ID, func(t *transition.Tx) error {
		var owner sql.NullString
		if e.Worker {
			owner = sql.NullString{String: e.Owner, Valid: true}
		}
		_, err := t.Exec(`INSERT INTO engines (id, host, pid, started_at, heartbeat_at, state, owner) VALUES (?, ?, ?, ?, ?, 'live', ?)`,
			e.ID, e.Host, e.PID, e.StartedAt.UnixMicro(), t.Now, owner)
		if err != nil {
			return fmt.Errorf("register engine %s: %w", e.ID, err)
		}
		return t.SetHandlers(e.ID, e.Handlers)
	})
}

// StopEngine marks an engine stopped.
func (s *maintenance) StopEngine(ctx context.Context, engineID string) error {
	return s.write(ctx, engineID, func(t *transition.Tx) error {
		_, err := t.Exec(`UPDATE engines SET state = 'stopped' WHERE id = ? AND state = 'live'`, engineID)
		if err != nil {
			return fmt.Errorf("stop engine %s: %w", engineID, err)
		}
		if _, err := t.Exec(`DELETE FROM leaders WHERE engine_id = ?`, engineID); err != nil {
			return fmt.Errorf("stop engine %s: resign: %w", engineID, err)
		}
		return nil
	})
}

// ListEngines returns live engines.
func (s *maintenance) ListEngines(ctx context.Context) ([]store.EngineInfo, error) {
	rows, err := s.Read(ctx, `SELECT `+engineColumns+` FROM engines WHERE state = 'live' ORDER BY started_at`, s.Clock().UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("list engines: %w", err)
	}
	engines, err := sqldb.Collect(rows, sqltx.ScanEngine)
	if err != nil {
		return nil, fmt.Errorf("list engines: %w", err)
	}
	return engines, nil
}

// engineColumns are what ScanEngine reads; its one argument is the time at
// which a leader's lease counts.
const engineColumns = `id, host, pid, started_at, heartbeat_at,
	EXISTS (SELECT 1 FROM leaders l WHERE l.engine_id = engines.id AND l.expires_at > ?), owner`

// GetEngine returns one engine or remote worker with its owner.
func (s *maintenance) GetEngine(ctx context.Context, id string) (*store.EngineInfo, error) {
	e, err := sqltx.ScanEngine(s.ReadRow(ctx, `SELECT `+engineColumns+` FROM engines WHERE id = ?`, s.Clock().UnixMicro(), id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("engine %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get engine %s: %w", id, err)
	}
	return &e, nil
}

// Heartbeat extends the engine's lease, reports the lost fences among the
// held ones and, when the list is complete, releases the steps the holder
// does not have.
func (s *maintenance) Heartbeat(ctx context.Context, p store.HeartbeatParams) (store.HeartbeatResult, error) {
	if len(p.Held) == 0 && (!p.Complete || p.ClaimedBefore.IsZero()) {
		// Nothing to check or release: the renewal alone, one statement.
		now := s.Clock()
		if !p.Now.IsZero() {
			now = p.Now
		}
		return store.HeartbeatResult{}, s.renew(ctx, p.EngineID, now)
	}
	var res store.HeartbeatResult
	err := s.write(ctx, p.EngineID, func(t *transition.Tx) error {
		if !p.Now.IsZero() {
			t.Now = p.Now.UnixMicro()
		}
		hb, err := t.Exec(`UPDATE engines SET heartbeat_at = ? WHERE id = ? AND state = 'live'`, t.Now, p.EngineID)
		if err != nil {
			return fmt.Errorf("heartbeat: %w", err)
		}
		if n, _ := hb.RowsAffected(); n == 0 {
			return fmt.Errorf("engine %s: %w", p.EngineID, store.ErrEngineLost)
		}
		if res.Lost, err = t.LostFences(p.Held, p.EngineID); err != nil {
			return err
		}
		held := p.Held
		if len(res.Lost) > 0 {
			held = slices.DeleteFunc(slices.Clone(held), func(f store.Fence) bool { return slices.Contains(res.Lost, f) })
		}
		if err := t.AuditHeldClaims(held); err != nil {
			return err
		}
		if p.Complete {
			res.Released, err = t.ReleaseUnheld(p)
		}
		return err
	})
	if err != nil {
		return store.HeartbeatResult{}, err
	}
	return res, nil
}

// renew extends the lease of an engine that holds nothing.
func (s *maintenance) renew(ctx context.Context, engineID string, now time.Time) error {
	hb, err := s.ExecAlone(ctx, `UPDATE engines SET heartbeat_at = ? WHERE id = ? AND state = 'live'`, now.UnixMicro(), engineID)
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if n, _ := hb.RowsAffected(); n == 0 {
		return fmt.Errorf("engine %s: %w", engineID, store.ErrEngineLost)
	}
	return nil
}

// ReleaseLease returns the steps running under one claim's lease to ready.
func (s *maintenance) ReleaseLease(ctx context.Context, engineID string, leaseID int64) (int, error) {
	n := 0
	err := s.write(ctx, engineID, func(t *transition.Tx) error {
		rows, err := t.Query(`SELECT id, attempt, lease_id FROM steps WHERE state = 'running' AND engine_id = ? AND lease_id = ?`, engineID, leaseID)
		if err != nil {
			return fmt.Errorf("find steps of lease %d: %w", leaseID, err)
		}
		fences, err := sqldb.Collect(rows, sqltx.ScanFence)
		if err != nil {
			return fmt.Errorf("find steps of lease %d: %w", leaseID, err)
		}
		n, err = t.Release(fences, engineID, "released: the engine never learned that its claim succeeded")
		return err
	})
	return n, err
}

// maintenanceRole is the leaders row of the engine that runs maintenance.
const maintenanceRole = "maintenance"

// leaseSeen is the maintenance lease as this handle last took or renewed
// it: a leader renewing its own lease goes straight to the write.
type leaseSeen struct {
	mu     sync.Mutex
	engine string
	until  int64
}

// holds reports whether engine held the lease at now, as last seen.
func (l *leaseSeen) holds(engine string, now int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.engine == engine && now < l.until
}

func (l *leaseSeen) set(engine string, until int64) {
	l.mu.Lock()
	l.engine, l.until = engine, until
	l.mu.Unlock()
}

// Lead takes or renews the maintenance lease: one conditional upsert, which
// takes the lease only from no one, from itself or from a lapsed holder.
func (s *maintenance) Lead(ctx context.Context, engineID string, now time.Time, ttl time.Duration) (bool, error) {
	at, until := now.UnixMicro(), now.Add(ttl).UnixMicro()
	if !s.lease.holds(engineID, at) {
		// Engines that do not lead ask often; answer them with a read
		// while another engine's lease runs, so that they take no lock.
		var holder string
		var expires int64
		err := s.ReadRow(ctx, `SELECT engine_id, expires_at FROM leaders WHERE role = ?`, maintenanceRole).Scan(&holder, &expires)
		switch {
		case err == nil && holder != engineID && expires > at:
			return false, nil
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return false, fmt.Errorf("read leader: %w", err)
		}
	}
	s.lease.set("", 0) // until the write says this engine holds it
	res, err := s.ExecAlone(ctx, `INSERT INTO leaders (role, engine_id, expires_at) VALUES (?, ?, ?)
		ON CONFLICT (role) DO UPDATE SET engine_id = excluded.engine_id, expires_at = excluded.expires_at
		WHERE leaders.engine_id = excluded.engine_id OR leaders.expires_at <= ?`, maintenanceRole, engineID, until, at)
	if err != nil {
		return false, fmt.Errorf("take the maintenance lease: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return false, fmt.Errorf("take the maintenance lease: %w", err)
	} else if n == 0 {
		return false, nil // another engine holds it
	}
	s.lease.set(engineID, until)
	return true, nil
}

// Reap returns the steps of lapsed engines to the queue, and those still
// running under engines already declared dead.
//
// The second kind exists on PostgreSQL: a claim reads its engine live in
// its first statement and again in the snapshot of its claim statement,
// but a reap that commits while that statement runs sees neither the rows
// it claims (not committed yet) nor stops it, so the claim commits its
// steps running under an engine just declared dead. That engine drops its
// in-flight work and registers anew, no heartbeat renews the dead
// identity, and a reap of lapsed engines only would never look at it
// again: the steps would stay running forever. SQLite's one writer orders
// the claim and the reap, so there the second kind finds nothing.
func (s *maintenance) Reap(ctx context.Context, now, staleBefore time.Time, dead []string, engineID string) (int, error) {
	args := []any{staleBefore.UnixMicro()}
	q := `SELECT id, state FROM engines WHERE state != 'dead' AND (heartbeat_at < ? OR state = 'stopped'`
	if len(dead) > 0 {
		q += ` OR id IN (` + sqltx.Placeholders(len(dead)) + `)`
		for _, d := range dead {
			args = append(args, d)
		}
	}
	// The running steps are few (at most every engine's slots), read from
	// the partial index steps_running; the dead engines, never deleted,
	// are looked up by key.
	q += `) UNION SELECT e.id, e.state FROM engines e WHERE e.state = 'dead' AND e.id IN (SELECT engine_id FROM steps WHERE state = 'running')`
	// Most reaps find nothing: a read answers them, without a transaction.
	rows, err := s.Read(ctx, q, args...)
	if err != nil {
		return 0, fmt.Errorf("find lapsed engines: %w", err)
	}
	found, err := sqldb.Collect(rows, scanEngineState)
	if err != nil {
		return 0, fmt.Errorf("find lapsed engines: %w", err)
	}
	if len(found) == 0 {
		return 0, nil
	}
	n := 0
	err = s.write(ctx, engineID, func(t *transition.Tx) error {
		t.Now = now.UnixMicro()
		// Again in the transaction: an engine may have heartbeated since.
		rows, err := t.Query(q, args...)
		if err != nil {
			return fmt.Errorf("find lapsed engines: %w", err)
		}
		engines, err := sqldb.Collect(rows, scanEngineState)
		if err != nil {
			return fmt.Errorf("find lapsed engines: %w", err)
		}
		if len(engines) == 0 {
			return nil
		}
		eargs := make([]any, len(engines))
		was := make(map[string]string, len(engines))
		for i, e := range engines {
			eargs[i] = e.id
			was[e.id] = e.state
		}
		if _, err := t.Exec(`UPDATE engines SET state = 'dead' WHERE id IN (`+sqltx.Placeholders(len(eargs))+`)`, eargs...); err != nil {
			return fmt.Errorf("mark engines dead: %w", err)
		}
		if _, err := t.Exec(`DELETE FROM leaders WHERE engine_id IN (`+sqltx.Placeholders(len(eargs))+`)`, eargs...); err != nil {
			return fmt.Errorf("end the leases of dead engines: %w", err)
		}
		rows, err = t.Query(`SELECT id, task_id, name, attempt, max_attempts, lease_id, engine_id FROM steps
			WHERE state = 'running' AND engine_id IN (`+sqltx.Placeholders(len(eargs))+`)`, eargs...)
		if err != nil {
			return fmt.Errorf("find steps of lapsed engines: %w", err)
		}
		type lapsed struct {
			fence        store.Fence
			taskID       int64
			name, engine string
			max          int
		}
		steps, err := sqldb.Collect(rows, func(r sqldb.Row) (lapsed, error) {
			var l lapsed
			err := r.Scan(&l.fence.StepID, &l.taskID, &l.name, &l.fence.Attempt, &l.max, &l.fence.LeaseID, &l.engine)
			return l, err
		})
		if err != nil {
			return fmt.Errorf("find steps of lapsed engines: %w", err)
		}
		t.Breakers.Lapsed = true // an engine's death is not its steps' failure
		for _, l := range steps {
			msg := fmt.Sprintf("lease lapsed: engine %s stopped heartbeating during attempt %d", l.engine, l.fence.Attempt)
			switch was[l.engine] {
			case "stopped":
				// It shut down with the step still running: its drain
				// ended before the handler did.
				msg = fmt.Sprintf("interrupted: engine %s stopped during attempt %d (its shutdown cut the attempt short)", l.engine, l.fence.Attempt)
			case "dead":
				// The claim committed after the reap that declared its
				// engine dead (see above).
				msg = fmt.Sprintf("lease lapsed: engine %s was declared dead before its claim of attempt %d committed", l.engine, l.fence.Attempt)
			}
			o := store.Outcome{Fence: l.fence, EngineID: engineID, State: state.StepReady, Error: msg, Reason: msg}
			if l.fence.Attempt >= l.max {
				o.State = state.StepFailed
			}
			if _, err := t.Finish(o); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}

// engineState is an engine's id and state, as Reap reads them.
type engineState struct{ id, state string }

func scanEngineState(r sqldb.Row) (engineState, error) {
	var e engineState
	err := r.Scan(&e.id, &e.state)
	return e, err
}
