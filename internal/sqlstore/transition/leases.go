package transition

import (
	"fmt"
	"sort"
	"strings"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds the writes on engines' leases: releasing claims their
// engine never received or no longer holds, the audit of the claims an
// engine still holds, and the handlers an engine serves.

// ReleaseUnheld releases the steps running under p.EngineID, claimed before
// p.ClaimedBefore, whose fence p.Held does not list: their holder never
// received them.
func (t *operatorTx) ReleaseUnheld(p store.HeartbeatParams) (int, error) {
	if p.ClaimedBefore.IsZero() {
		return 0, nil
	}
	rows, err := t.Query(`SELECT id, attempt, lease_id FROM steps WHERE state = 'running' AND engine_id = ? AND started_at < ? ORDER BY id`,
		p.EngineID, p.ClaimedBefore.UnixMicro())
	if err != nil {
		return 0, fmt.Errorf("find steps of engine %s: %w", p.EngineID, err)
	}
	running, err := sqldb.Collect(rows, sqltx.ScanFence)
	if err != nil {
		return 0, fmt.Errorf("find steps of engine %s: %w", p.EngineID, err)
	}
	held := make(map[store.Fence]bool, len(p.Held))
	for _, f := range p.Held {
		held[f] = true
	}
	unheld := running[:0]
	for _, f := range running {
		if !held[f] {
			unheld = append(unheld, f)
		}
	}
	return t.Release(unheld, p.EngineID, "released: not held by its worker")
}

// LostFences returns the fences of inflight under which their step no
// longer runs for engineID: it was cancelled, finished or taken over, or
// it never ran there (another engine's or worker's fence).
func (t *operatorTx) LostFences(inflight []store.Fence, engineID string) ([]store.Fence, error) {
	if len(inflight) == 0 {
		return nil, nil
	}
	ids := make([]int64, len(inflight))
	for i, f := range inflight {
		ids[i] = f.StepID
	}
	in, inArgs := t.IDIn("id", ids)
	rows, err := t.Query(`SELECT id, attempt, lease_id FROM steps WHERE state = 'running' AND engine_id = ? AND `+in, append([]any{engineID}, inArgs...)...)
	if err != nil {
		return nil, fmt.Errorf("check in-flight steps: %w", err)
	}
	running, err := sqldb.Collect(rows, sqltx.ScanFence)
	if err != nil {
		return nil, fmt.Errorf("check in-flight steps: %w", err)
	}
	held := make(map[store.Fence]bool, len(running))
	for _, f := range running {
		held[f] = true
	}
	var lost []store.Fence
	for _, f := range inflight {
		if !held[f] {
			lost = append(lost, f)
		}
	}
	return lost, nil
}

// AuditHeldClaims writes the audit rows of the claims of held steps that
// still run and that no row records yet: a claim is recorded by the row
// that ends its run (claimOfRun), or here, within a heartbeat, for a run
// that lasts, so that the history shows it while the step runs.
func (t *operatorTx) AuditHeldClaims(held []store.Fence) error {
	if len(held) == 0 {
		return nil
	}
	// By fence, not by id: a held fence can be stale (its run ended and
	// the step was claimed again since), and the later claim is not the
	// holder's to audit. On PostgreSQL the update rechecks a row that
	// changed under it against its newest version while the subquery
	// reads the statement's snapshot: matched by id, a later claim was
	// audited with the earlier one's task start.
	from, args := sqltx.Rowset(t.SQL(), "h", held,
		sqltx.IntCol("h_id", func(f *store.Fence) int64 { return f.StepID }),
		sqltx.IntCol("h_attempt", func(f *store.Fence) int64 { return int64(f.Attempt) }),
		sqltx.IntCol("h_lease", func(f *store.Fence) int64 { return f.LeaseID }))
	rows, err := t.Query(`UPDATE steps SET claim_audited = 1 FROM `+from+`
		WHERE steps.id = h.h_id AND steps.attempt = h.h_attempt AND steps.lease_id = h.h_lease
			AND steps.state = 'running' AND steps.claim_audited = 0
		RETURNING steps.task_id, steps.name, steps.idx, steps.attempt, steps.engine_id, steps.started_at,
			(SELECT `+sqltx.ClaimStarts+` = 1 FROM steps s JOIN tasks t ON t.id = s.task_id WHERE s.id = steps.id)`, args...)
	if err != nil {
		return fmt.Errorf("audit the claims of held steps: %w", err)
	}
	type claimed struct {
		sqltx.RunClaim
		taskID, idx int64
		name        string
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (claimed, error) {
		var c claimed
		err := r.Scan(&c.taskID, &c.name, &c.idx, &c.Attempt, &c.Engine, &c.At, &c.Starts)
		return c, err
	})
	if err != nil {
		return fmt.Errorf("audit the claims of held steps: %w", err)
	}
	sort.Slice(got, func(i, j int) bool {
		a, b := got[i], got[j]
		return a.At < b.At || (a.At == b.At && (a.taskID < b.taskID || (a.taskID == b.taskID && a.idx < b.idx)))
	})
	for _, c := range got {
		t.AuditClaim(c.taskID, c.name, c.RunClaim)
	}
	return nil
}

// Release returns running steps to ready, giving their attempt back, and
// counts those whose fence still held.
func (t *operatorTx) Release(fences []store.Fence, engineID, reason string) (int, error) {
	n := 0
	for _, f := range fences {
		ok, err := t.Finish(store.Outcome{Fence: f, EngineID: engineID, State: state.StepReady, Snooze: true, Reason: reason})
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// SetHandlers records the handlers engine engineID serves, in place of
// those it served.
func (t *operatorTx) SetHandlers(engineID string, handlers []string) error {
	if _, err := t.Exec(`DELETE FROM engine_handlers WHERE engine_id = ?`, engineID); err != nil {
		return fmt.Errorf("handlers of %s: %w", engineID, err)
	}
	seen := map[string]bool{}
	var args []any
	for _, h := range handlers {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		args = append(args, engineID, h)
	}
	if len(args) == 0 {
		return nil
	}
	q := `INSERT INTO engine_handlers (engine_id, handler) VALUES ` + strings.Repeat("(?, ?), ", len(args)/2-1) + `(?, ?)`
	if _, err := t.Exec(q, args...); err != nil {
		return fmt.Errorf("handlers of %s: %w", engineID, err)
	}
	return nil
}
