package server

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/duration"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// This file holds the operator routes on many tasks (bulk cancel, retry,
// delete, prune), retention and the list of engines and workers.

// queryTags reads repeated tag=KEY=VALUE query parameters into f.
func queryTags(tags []string, f *store.TaskFilter) error {
	for _, t := range tags {
		k, v, err := store.ParseTag(t)
		if err != nil {
			return inField("tag", err)
		}
		if f.Tags == nil {
			f.Tags = map[string]string{}
		}
		f.Tags[k] = v
	}
	return nil
}

// bulkRequest reads and validates the body of a bulk action.
func (s *Server) bulkRequest(r *http.Request) (weft.BulkRequest, error) {
	var req wire.BulkRequest
	if err := decode(r, &req); err != nil {
		return weft.BulkRequest{}, err
	}
	if err := checkReason(req.Reason); err != nil {
		return weft.BulkRequest{}, err
	}
	in := req.Filter
	f := store.TaskFilter{Namespace: in.Namespace, Namespaces: requestScope(r).Filter(), Workflow: in.Workflow, State: state.Task(in.State), Tags: in.Tags, Schedule: in.Schedule, Attention: in.Attention}
	for _, tf := range []struct {
		src *time.Time
		dst *time.Time
	}{{in.CreatedAfter, &f.CreatedAfter}, {in.CreatedBefore, &f.CreatedBefore}, {in.FinishedBefore, &f.FinishedBefore}} {
		if tf.src != nil {
			*tf.dst = *tf.src
		}
	}
	if req.Cursor < 0 {
		return weft.BulkRequest{}, fieldError("cursor", "must be the \"next\" of an answer, a positive task id, got %d", req.Cursor)
	}
	if len(req.IDs) > 0 {
		if err := checkBulkIDs(req.IDs, f.Selects() || req.All); err != nil {
			return weft.BulkRequest{}, err
		}
		if req.Cursor != 0 {
			return weft.BulkRequest{}, fieldError("cursor", "continues an action by filter: with ids, send the ids that remain")
		}
		return s.paced(r, weft.BulkRequest{IDs: req.IDs, Filter: store.TaskFilter{Namespaces: f.Namespaces}, DryRun: req.DryRun, Force: req.Force, Actor: operator(r.Context()), Reason: req.Reason}), nil
	}
	if f.Attention {
		f.StaleAfter = s.engine.StaleAfter()
	}
	return s.paced(r, weft.BulkRequest{Filter: f, All: req.All, DryRun: req.DryRun, Force: req.Force, Actor: operator(r.Context()), Reason: req.Reason,
		Cursor: req.Cursor}), nil
}

// paced sets how a bulk action of request r is cut: its batch size and,
// so that it answers with its progress rather than run out of time, to
// start no batch once half of the request's time has passed (or after
// BulkMaxBatches batches).
func (s *Server) paced(r *http.Request, b weft.BulkRequest) weft.BulkRequest {
	b.BatchSize, b.MaxBatches = s.opts.BulkBatchSize, s.opts.BulkMaxBatches
	if deadline, ok := r.Context().Deadline(); ok {
		now := time.Now()
		b.Until = now.Add(deadline.Sub(now) / 2)
	}
	return b
}

// checkBulkIDs checks the ids of a bulk request that names its tasks: no
// filter (or all) beside them, at most wire.MaxBulkIDs, each a task id.
func checkBulkIDs(ids []int64, filtered bool) error {
	if filtered {
		return fieldError("ids", "give task ids or a filter (or all), not both")
	}
	if len(ids) > wire.MaxBulkIDs {
		return fieldError("ids", "%d ids: at most %d in one request", len(ids), wire.MaxBulkIDs)
	}
	for i, id := range ids {
		if id <= 0 {
			return fieldError(fmt.Sprintf("ids[%d]", i), "%d is not a task id (a positive integer)", id)
		}
	}
	return nil
}

func (s *Server) bulk(r *http.Request, do func(*weft.Engine, weft.BulkRequest) (weft.BulkResult, error)) (int, any, error) {
	req, err := s.bulkRequest(r)
	if err != nil {
		return 0, nil, err
	}
	res, err := do(s.engine, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.BulkResult(res), nil
}

func (s *Server) bulkCancel(r *http.Request) (int, any, error) {
	return s.bulk(r, func(e *weft.Engine, b weft.BulkRequest) (weft.BulkResult, error) {
		return e.CancelTasks(r.Context(), b)
	})
}

func (s *Server) bulkRetry(r *http.Request) (int, any, error) {
	return s.bulk(r, func(e *weft.Engine, b weft.BulkRequest) (weft.BulkResult, error) { return e.RetryTasks(r.Context(), b) })
}

func (s *Server) bulkDelete(r *http.Request) (int, any, error) {
	return s.bulk(r, func(e *weft.Engine, b weft.BulkRequest) (weft.BulkResult, error) {
		return e.DeleteTasks(r.Context(), b)
	})
}

// parseAge reads a retention such as "7d", "12h" or "90m": more than 0.
func parseAge(field, v string) (time.Duration, error) {
	d, err := parseDuration(field, v)
	if err == nil && d <= 0 {
		err = fieldError(field, "%q: want a positive duration such as 7d, 12h or 90m", v)
	}
	return d, err
}

// parseDuration reads a duration such as 7d, 12h or 90m, 0 included
// (internal/duration refuses a negative one).
func parseDuration(field, v string) (time.Duration, error) {
	d, err := duration.Parse(v)
	if err != nil {
		return 0, fieldError(field, "%q: want a positive duration such as 7d, 12h or 90m", v)
	}
	return d, nil
}

func (s *Server) prune(r *http.Request) (int, any, error) {
	var req wire.PruneRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	st := state.Task(req.State)
	switch st {
	case state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired:
	default:
		return 0, nil, fieldError("state", "is required: completed, failed, cancelled or expired, got %q", req.State)
	}
	age, err := parseDuration("older_than", req.OlderThan)
	if err != nil {
		return 0, nil, err
	}
	var fe *weft.FieldError
	if errors.As(weft.CheckPruneAge(st, age), &fe) {
		return 0, nil, fieldError("older_than", "%s (POST /v1/tasks/delete with a state filter)", fe.Problem)
	}
	if req.Cursor < 0 {
		return 0, nil, fieldError("cursor", "must be the \"next\" of an answer, a positive task id, got %d", req.Cursor)
	}
	res, err := s.engine.Prune(r.Context(), st, age, s.paced(r, weft.BulkRequest{Filter: store.TaskFilter{Namespace: req.Namespace, Namespaces: requestScope(r).Filter()}, All: true,
		DryRun: req.DryRun, Actor: operator(r.Context()), Reason: "pruned: " + req.State + " older than " + req.OlderThan, Cursor: req.Cursor}))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.BulkResult(res), nil
}

func (s *Server) listRetention(r *http.Request) (int, any, error) {
	rs, err := s.engine.Retentions(r.Context())
	if err != nil {
		return 0, nil, err
	}
	rs = visible(r, rs, func(r store.Retention) string { return r.Namespace })
	if rs == nil {
		rs = []store.Retention{}
	}
	return http.StatusOK, wire.RetentionList{Retention: wire.List(rs, wire.RetentionSettingOf)}, nil
}

func (s *Server) setRetention(r *http.Request) (int, any, error) {
	ns := r.PathValue("namespace")
	var req wire.Retention
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if len(req.Keep) == 0 {
		return 0, nil, fieldError("keep", "is required: {\"completed\": \"7d\", …}")
	}
	keep := map[state.Task]time.Duration{}
	for k, v := range req.Keep {
		st := state.Task(k)
		switch st {
		case state.TaskCompleted, state.TaskFailed, state.TaskCancelled, state.TaskExpired:
		default:
			return 0, nil, fieldError("keep."+k, "not a final task state (completed, failed, cancelled, expired)")
		}
		if v == "" {
			keep[st] = 0
			continue
		}
		d, err := parseAge("keep."+k, v)
		if err != nil {
			return 0, nil, err
		}
		keep[st] = d
	}
	for st, d := range keep {
		if err := s.engine.SetRetention(r.Context(), ns, st, d, weft.Operator{Actor: operator(r.Context())}); err != nil {
			return 0, nil, err
		}
	}
	return s.listRetention(r)
}

func (s *Server) listWorkers(r *http.Request) (int, any, error) {
	ws, err := s.engine.ListWorkers(r.Context())
	if err != nil {
		return 0, nil, err
	}
	p, _ := PrincipalFrom(r.Context())
	ws = VisibleWorkers(requestScope(r), p, ws)
	out := wire.WorkerList{Workers: make([]wire.Worker, 0, len(ws))}
	for _, w := range ws {
		kind := "engine"
		if w.Worker {
			kind = "remote"
		}
		h := w.Handlers
		if h == nil {
			h = []string{}
		}
		out.Workers = append(out.Workers, wire.Worker{ID: w.ID, Kind: kind, Host: w.Host, PID: w.PID, Leader: w.Leader, Handlers: h, Held: w.Held,
			StartedAt: w.StartedAt, HeartbeatAt: w.HeartbeatAt})
	}
	return http.StatusOK, out, nil
}

func (s *Server) operatorLog(r *http.Request) (int, any, error) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			return 0, nil, fieldError("limit", "must be an integer from 1 to 1000, got %q", v)
		}
		limit = n
	}
	entries, err := s.engine.OperatorLog(r.Context(), limit)
	if err != nil {
		return 0, nil, err
	}
	if entries == nil {
		entries = []store.OperatorEntry{}
	}
	return http.StatusOK, wire.OperatorLog{Entries: wire.List(entries, wire.OperatorEntryOf)}, nil
}
