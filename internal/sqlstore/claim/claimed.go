package claim

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/weftrun/weft/internal/sqlstore/sqldb"
	"github.com/weftrun/weft/internal/sqlstore/sqltx"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// This file holds what a claim does to the steps it picked (claim.go): it
// runs the claim statement (claimstmt.go), which marks them running under
// the lease and starts their tasks, reads the steps it returns, and loads
// what their handlers see.

// claim marks candidates running and returns them with the indexes of their
// dependencies. They are still ready: this transaction locked them (FOR
// UPDATE) or is the only writer, so the update looks them up by primary key
// alone. Where the database allows it, the same statement starts their
// tasks and loads the task's part of what the handlers see (claimContext
// does the rest).
func (t *ClaimTx) claim(ids []int64, leaseID int64) ([]store.ClaimedStep, [][]int, error) {
	where, inArgs := t.IDIn("id", ids)
	st, err := t.ClaimStatement(ClaimFrom{where: where, Args: inArgs}, leaseID)
	if err != nil {
		return nil, nil, err
	}
	if t.lastClaim {
		// Nothing follows (endsWithClaim): the COMMIT goes with it.
		t.lastClaim = false
		t.X.(sqldb.Pipeliner).EndWithNext()
		t.committed = true
	}
	rows, err := t.Query(st.Query, st.Args...)
	if err != nil {
		return nil, nil, fmt.Errorf("claim steps: %w", err)
	}
	out, deps, _, err := t.readClaimed(rows, st, len(ids), leaseID)
	if err != nil {
		return nil, nil, err
	}
	return out, deps, nil
}

// readClaimed reads the rows of claim statement st (about n of them): the
// steps it claimed, with the indexes of their dependencies. shut: it
// claimed from its query of candidates and found the gate shut (gateShut).
func (t *ClaimTx) readClaimed(rows sqldb.Rows, st claimStmt, n int, leaseID int64) (out []store.ClaimedStep, deps [][]int, shut bool, err error) {
	type claimedRow struct {
		sortKey int64
		task    ClaimedTask
		results sql.NullString // of its dependencies: depResultsOf
		started bool
		totals  [2]sql.NullInt64
		granted []string
		claimed bool
	}
	// One set of scan destinations for every row.
	var x sqltx.StepScan
	var c claimedRow
	dest := append(x.ClaimedDest(), &c.sortKey)
	if t.H.Dialect.WithWrites() {
		dest = append(append(dest, c.task.Dest()...), &c.results, &c.started)
	}
	if st.totaling {
		dest = append(dest, &c.totals[0], &c.totals[1])
	}
	if st.taking {
		dest = append(dest, &c.granted)
	}
	if st.gated {
		dest = append(dest, &c.claimed)
	}
	// Each row becomes its claimed step as it is read: the rows are large,
	// and a claim under a backlog reads a hundred of them.
	out = make([]store.ClaimedStep, 0, n)
	deps = make([][]int, 0, n)
	first := true
	err = sqldb.Each(rows, func(r sqldb.Row) error {
		x, c = sqltx.StepScan{}, claimedRow{}
		if err := r.Scan(dest...); err != nil || shut {
			return err
		}
		if first {
			first = false
			if st.gated && !c.claimed {
				shut = true
				return nil
			}
			if st.taking {
				if err := t.rateTake.readGrants(c.granted); err != nil {
					return err
				}
			}
		}
		step := x.Claimed(t.Engine, t.Now)
		// The sort key is the time the step became ready less its priority's
		// aging credit.
		out = append(out, store.ClaimedStep{Step: step.Step, Fence: store.Fence{StepID: step.ID, Attempt: step.Attempts, LeaseID: leaseID},
			ReadyAt: time.UnixMicro(c.sortKey + int64(step.Priority)*t.H.Aging)})
		deps = append(deps, step.Deps)
		if c.totals[0].Valid {
			t.totaled(step.Namespace, c.started, limitTotals{c.totals[0].Int64, c.totals[1].Int64})
		}
		if t.H.Dialect.WithWrites() {
			c.task.set(&out[len(out)-1]) // the statement started the tasks
			if len(step.Deps) > 0 {
				return t.readDepResults(step.ID, c.results)
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, false, fmt.Errorf("claim steps: %w", err)
	}
	if shut {
		return nil, nil, true, nil
	}
	return out, deps, false, nil
}

// ClaimedTask is the part of what a claimed step's handler sees that comes
// from its task.
type ClaimedTask struct {
	input                           json.RawMessage
	workflow, version, traceContext string
}

// ClaimedTaskColumns are a task's columns of ClaimedTask, in the order of
// its dest.
const ClaimedTaskColumns = `input, workflow, version, trace_context`

// Dest returns the scan destinations of ClaimedTaskColumns.
func (c *ClaimedTask) Dest() []any { return []any{&c.input, &c.workflow, &c.version, &c.traceContext} }

func (c ClaimedTask) set(s *store.ClaimedStep) {
	s.Input, s.Workflow, s.Version = c.input, c.workflow, c.version
	s.TraceParent, s.TraceState = sqltx.UnpackTrace(c.traceContext)
}

// claimContext starts the claimed steps' tasks and loads what the handlers
// see: the task input (unless claim did both already) and the results of
// dependencies by name.
func (t *ClaimTx) claimContext(claimed []store.ClaimedStep, deps [][]int) error {
	if !t.H.Dialect.WithWrites() {
		if err := t.startTasks(claimed, deps); err != nil {
			return err
		}
	}
	// The results of every claimed step's dependencies not read with its
	// claim statement, nor recorded by this transaction (ranBefore), in
	// one statement.
	var unread []int
	for i := range claimed {
		if len(deps[i]) == 0 {
			continue
		}
		claimed[i].Deps = make(map[string]json.RawMessage, len(deps[i]))
		if _, read := t.depResults[claimed[i].ID]; !read && !t.ranBefore(claimed[i], deps[i]) {
			unread = append(unread, i)
		}
	}
	if len(unread) > 0 {
		type dep struct{ claim, task, idx int64 } // a claimed step, its task, a dependency's index
		var pairs []dep
		for _, i := range unread {
			for _, d := range deps[i] {
				pairs = append(pairs, dep{claimed[i].ID, claimed[i].TaskID, int64(d)})
			}
		}
		from, args := sqltx.Rowset(t.Tx, "d", pairs,
			sqltx.IntCol("d_claim", func(d *dep) int64 { return d.claim }),
			sqltx.IntCol("d_task", func(d *dep) int64 { return d.task }),
			sqltx.IntCol("d_idx", func(d *dep) int64 { return d.idx }))
		rows, err := t.Query(`SELECT d.d_claim, s.name, s.result, s.kind, s.idx FROM `+from+`
			JOIN steps s ON s.task_id = d.d_task AND s.idx = d.d_idx WHERE s.state != 'skipped'`, args...)
		if err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		if err := t.readDepRows(rows); err != nil {
			return err
		}
	}
	for i := range claimed {
		c := &claimed[i]
		for _, d := range t.depResults[c.ID] {
			c.Deps[d.Name] = sqltx.NullJSON(d.Result)
			c.DependsOn = append(c.DependsOn, d.Name)
			if d.Kind == store.KindBatch {
				// A batch step's result is its items' results.
				var err error
				if c.Deps[d.Name], err = t.batchResults(c.TaskID, d.Idx); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// StepAt is a step by its task and index.
type StepAt struct{ Task, Idx int64 }

// ranBefore reports whether every dependency (deps, indexes) of claimed
// step c ended in a run this transaction recorded, and then takes their
// results as c's, in index order, as a read of them would give.
func (t *ClaimTx) ranBefore(c store.ClaimedStep, deps []int) bool {
	if len(t.Ran) == 0 {
		return false
	}
	results := make([]DepResult, 0, len(deps))
	for _, d := range deps {
		r, ok := t.Ran[StepAt{c.TaskID, int64(d)}]
		if !ok {
			return false
		}
		results = append(results, r)
	}
	sort.Slice(results, func(i, j int) bool { return results[i].Idx < results[j].Idx })
	if t.depResults == nil {
		t.depResults = map[int64][]DepResult{}
	}
	t.depResults[c.ID] = results
	return true
}

// ResultText is a result as its step's row holds it, and as a parameter
// writes it: NULL where empty.
func ResultText(r json.RawMessage) sql.NullString {
	return sql.NullString{String: string(r), Valid: len(r) > 0}
}

// depResultsOf is a column of the claim statement's rows, where a
// statement's WITH may write: the results of the step's dependencies as a
// JSON array of [name, result, kind, index] in index order
// (readDepResults), or NULL where it has none. Skipped dependencies did
// not run: they have no result to pass on.
const depResultsOf = `CASE WHEN s.deps <> '' THEN (SELECT json_agg(json_build_array(d.name, d.result, d.kind, d.idx) ORDER BY d.idx)::text
	FROM steps d WHERE d.task_id = s.task_id AND d.idx = ANY(string_to_array(s.deps, ',')::bigint[]) AND d.state != 'skipped') END`

// DepResult is the result of a dependency of a claimed step.
type DepResult struct {
	Name, Kind string
	Result     sql.NullString
	Idx        int
}

// readDepResults reads the results of the dependencies of claimed step id
// as the claim statement returned them (depResultsOf) into t.depResults:
// none where NULL (every dependency skipped).
func (t *ClaimTx) readDepResults(id int64, col sql.NullString) error {
	if t.depResults == nil {
		t.depResults = map[int64][]DepResult{}
	}
	if !col.Valid {
		t.depResults[id] = nil
		return nil
	}
	var got [][4]json.RawMessage
	if err := json.Unmarshal([]byte(col.String), &got); err != nil {
		return fmt.Errorf("load dependency results: %w", err)
	}
	results := make([]DepResult, len(got))
	for i, g := range got {
		d := &results[i]
		var result *string
		if err := errors.Join(json.Unmarshal(g[0], &d.Name), json.Unmarshal(g[1], &result),
			json.Unmarshal(g[2], &d.Kind), json.Unmarshal(g[3], &d.Idx)); err != nil {
			return fmt.Errorf("load dependency results: %w", err)
		}
		if result != nil {
			d.Result = sql.NullString{String: *result, Valid: true}
		}
	}
	t.depResults[id] = results
	return nil
}

// readDepRows reads rows of dependency results (the claimed step's id,
// the dependency's name, result, kind and index) into t.depResults, each
// step's in index order.
func (t *ClaimTx) readDepRows(rows sqldb.Rows) error {
	type row struct {
		step int64
		DepResult
	}
	got, err := sqldb.Collect(rows, func(r sqldb.Row) (row, error) {
		var d row
		err := r.Scan(&d.step, &d.Name, &d.Result, &d.Kind, &d.Idx)
		return d, err
	})
	if err != nil {
		return fmt.Errorf("load dependency results: %w", err)
	}
	sort.Slice(got, func(i, j int) bool {
		return got[i].step < got[j].step || (got[i].step == got[j].step && got[i].Idx < got[j].Idx)
	})
	if t.depResults == nil {
		t.depResults = map[int64][]DepResult{}
	}
	for _, d := range got {
		t.depResults[d.step] = append(t.depResults[d.step], d.DepResult)
	}
	return nil
}

// startTasks starts the claimed steps' tasks whose first step this is and
// loads the task's part of what the handlers see, where claim could not.
// A step with dependencies belongs to a task that started when they ran,
// or, should they all have been skipped before any ran, to one still
// pending that the read below finds.
func (t *ClaimTx) startTasks(claimed []store.ClaimedStep, deps [][]int) error {
	var ids, mayStart []int64
	seen := map[int64]bool{}
	starting := map[int64]bool{}
	for i, c := range claimed {
		if !seen[c.TaskID] {
			seen[c.TaskID] = true
			ids = append(ids, c.TaskID)
		}
		if len(deps[i]) == 0 && !starting[c.TaskID] {
			starting[c.TaskID] = true
			mayStart = append(mayStart, c.TaskID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	lease := claimed[0].Fence.LeaseID // one claim's, under one lease
	if err := state.CheckTask(state.TaskPending, state.TaskRunning); err != nil {
		return err
	}
	type loaded struct {
		id    int64
		state string
		ClaimedTask
	}
	// Tasks whose first step this is start, and return what the handlers
	// see; the others (their steps ran before) are read.
	read := func(q string, args ...any) ([]loaded, error) {
		rows, err := t.Query(q, args...)
		if err != nil {
			return nil, err
		}
		return sqldb.Collect(rows, func(r sqldb.Row) (loaded, error) {
			var l loaded
			return l, r.Scan(append([]any{&l.id, &l.state}, l.ClaimedTask.Dest()...)...)
		})
	}
	// The task's start rides on the claim of one step this claim took
	// (start_step): here its first by index (on PostgreSQL the first in the
	// claim statement's rows), known from the claimed steps and given with
	// each task's id: finding it by the task's steps in the statement read
	// each of them again, and took 40% of the statement.
	type started struct{ task, step int64 }
	first := map[int64]int64{}
	for _, c := range claimed {
		if v, ok := first[c.TaskID]; !ok || int64(c.Index) < v {
			first[c.TaskID] = int64(c.Index)
		}
	}
	start := func(ids []int64) ([]loaded, error) {
		const set, ret = `UPDATE tasks SET state = 'running', started_at = ?, start_lease = ?, start_step = `,
			` AND (state || '') = 'pending' RETURNING id, state, ` + ClaimedTaskColumns
		var got []loaded
		var err error
		if t.ByParams(len(ids)) {
			got, err = read(set+`? WHERE id = ?`+ret, t.Now, lease, first[ids[0]], ids[0])
		} else {
			starts := make([]started, len(ids))
			for i, id := range ids {
				starts[i] = started{id, first[id]}
			}
			from, args := sqltx.Rowset(t.Tx, "s", starts,
				sqltx.IntCol("s_task", func(s *started) int64 { return s.task }),
				sqltx.IntCol("s_step", func(s *started) int64 { return s.step }))
			got, err = read(set+`s.s_step FROM `+from+` WHERE tasks.id = s.s_task`+ret, append([]any{t.Now, lease}, args...)...)
		}
		if err != nil {
			return nil, fmt.Errorf("start tasks: %w", err)
		}
		return got, nil
	}
	var infos []loaded
	if len(mayStart) > 0 {
		got, err := start(mayStart)
		if err != nil {
			return err
		}
		infos = got
	}
	seen = make(map[int64]bool, len(ids))
	for _, l := range infos {
		seen[l.id] = true
	}
	var rest []int64
	for _, id := range ids {
		switch ct, ok := t.Started[id]; {
		case seen[id]:
		case ok:
			infos = append(infos, loaded{id: id, ClaimedTask: ct})
		default:
			rest = append(rest, id)
		}
	}
	if len(rest) > 0 {
		in, inArgs := t.IDIn("id", rest)
		more, err := read(`SELECT id, state, `+ClaimedTaskColumns+` FROM tasks WHERE `+in, inArgs...)
		if err != nil {
			return fmt.Errorf("load tasks: %w", err)
		}
		var pending []int64
		for _, l := range more {
			if l.state == string(state.TaskPending) {
				pending = append(pending, l.id)
			} else {
				infos = append(infos, l)
			}
		}
		if len(pending) > 0 {
			got, err := start(pending)
			if err != nil {
				return err
			}
			infos = append(infos, got...)
		}
	}
	tasks := make(map[int64]ClaimedTask, len(infos))
	for _, l := range infos {
		tasks[l.id] = l.ClaimedTask
	}
	for i := range claimed {
		tasks[claimed[i].TaskID].set(&claimed[i])
	}
	return nil
}

// batchResults returns the results of a batch step's items as one JSON
// array, in item order; an item without a result (failed, skipped) is null.
func (t *ClaimTx) batchResults(taskID int64, batchIdx int) (json.RawMessage, error) {
	q, args := `SELECT result FROM steps WHERE task_id = ? AND batch_of = ? ORDER BY idx`, []any{taskID, batchIdx}
	var rows sqldb.Rows
	var err error
	if t.committed {
		// A claim that committed with its statement reads after it.
		rows, err = t.H.Read(t.Ctx, q, args...)
	} else {
		rows, err = t.Query(q, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("load batch results: %w", err)
	}
	results, err := sqldb.Collect(rows, func(r sqldb.Row) (sql.NullString, error) {
		var v sql.NullString
		err := r.Scan(&v)
		return v, err
	})
	if err != nil {
		return nil, fmt.Errorf("load batch results: %w", err)
	}
	var b bytes.Buffer
	b.WriteByte('[')
	for i, result := range results {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(sqltx.NullJSON(result))
	}
	b.WriteByte(']')
	return b.Bytes(), nil
}
