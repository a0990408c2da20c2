package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// view of the engine a page reads through: bound to where the signed-in
// credential may use the page's permission. The pages reach the engine
// through it alone, so a page shows nothing of a namespace the key may
// not read, in its lists, counts and charts alike; what lies outside is
// not found, as on the API.
type scoped struct {
	e  *weft.Engine
	sc server.Scope
	p  server.Principal
}

type scopedKey struct{}

// in returns the engine as the page's request may read it.
func (d *Dashboard) in(r *http.Request) *scoped {
	if s, ok := r.Context().Value(scopedKey{}).(*scoped); ok {
		return s
	}
	return &scoped{e: d.engine} // no page: a scope that holds nowhere
}

// withScoped binds the request's reads to principal p's scope of perm.
func (d *Dashboard) withScoped(r *http.Request, p server.Principal, perm string) *http.Request {
	return r.WithContext(context.WithValue(r.Context(), scopedKey{}, &scoped{e: d.engine, sc: p.Scope(perm), p: p}))
}

func (s *scoped) Workflows(ctx context.Context) ([]weft.WorkflowRecord, error) {
	ws, err := s.e.Workflows(ctx)
	return server.Visible(s.sc, ws, func(w weft.WorkflowRecord) string { return w.Namespace }), err
}

func (s *scoped) Registered(ctx context.Context, ns, name, version string) (*weft.WorkflowRecord, error) {
	if !s.sc.Has(ns) {
		return nil, fmt.Errorf("workflow %s/%s: %w", ns, name, weft.ErrNotFound)
	}
	return s.e.Registered(ctx, ns, name, version)
}

func (s *scoped) Workflow(ctx context.Context, ns, name, version string) (*workflow.Workflow, error) {
	if !s.sc.Has(ns) {
		return nil, fmt.Errorf("workflow %s/%s: %w", ns, name, weft.ErrNotFound)
	}
	return s.e.Workflow(ctx, ns, name, version)
}

func (s *scoped) List(ctx context.Context, f weft.TaskFilter) ([]weft.Task, error) {
	f.Namespaces = s.sc.Filter()
	return s.e.List(ctx, f)
}

// Get returns a task with its steps and audit trail.
func (s *scoped) Get(ctx context.Context, id int64) (*weft.Task, []weft.AuditEntry, error) {
	t, err := s.e.Get(ctx, id)
	if err != nil {
		return nil, nil, err
	}
	if !s.sc.Has(t.Namespace) {
		return nil, nil, fmt.Errorf("task %d: %w", id, weft.ErrNotFound)
	}
	audit, err := s.e.Audit(ctx, id)
	return t, audit, err
}

func (s *scoped) QueueDepth(ctx context.Context) ([]weft.QueueCount, error) {
	depth, err := s.e.QueueDepth(ctx)
	return server.Visible(s.sc, depth, func(c weft.QueueCount) string { return c.Namespace }), err
}

func (s *scoped) CountTasksByState(ctx context.Context, limit int) ([]store.StateCount, error) {
	return s.e.Stats().CountTasksByState(ctx, limit, s.sc.Filter())
}

func (s *scoped) TaskActivity(ctx context.Context, q store.ActivityQuery) (store.Activity, error) {
	q.Namespaces = s.sc.Filter()
	return s.e.Stats().TaskActivity(ctx, q)
}

func (s *scoped) Workers(ctx context.Context) ([]weft.WorkerInfo, error) {
	ws, err := s.e.ListWorkers(ctx)
	return server.VisibleWorkers(s.sc, s.p, ws), err
}

func (s *scoped) LeaseTTL() time.Duration { return s.e.Workers().LeaseTTL() }

func (s *scoped) Policies(ctx context.Context) (weft.PolicyReport, error) {
	rep, err := s.e.Policies(ctx)
	return server.VisiblePolicies(s.sc, rep), err
}

func (s *scoped) PolicyChanges(ctx context.Context, limit int) ([]weft.PolicyChangeRecord, error) {
	changes, err := s.e.PolicyChanges(ctx, limit)
	return server.VisiblePolicyChanges(s.sc, changes), err
}

func (s *scoped) Schedules(ctx context.Context, f weft.ScheduleFilter) ([]weft.Schedule, error) {
	list, err := s.e.Schedules(ctx, f)
	return server.Visible(s.sc, list, func(s weft.Schedule) string { return s.Namespace }), err
}
