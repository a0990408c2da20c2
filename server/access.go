package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
)

// This file holds where a request may act: every route says how its
// namespace is known (scopeBy), and wrap checks the credential's scope of
// the route's permission there before the handler runs, or hands it to a
// handler that reads the namespaces from its body or filter (byHandler),
// and refuses the answer of one that did not look at it.
//
// What lies outside the scope is not found, as what does not exist:
// an answer never confirms that another namespace's task, workflow or
// webhook exists. A write into a namespace the caller names itself (a
// submission, a policy) is refused with 403, which confirms nothing.

// scopeBy is how a route's namespace is known.
type scopeBy int

const (
	scopeUnset scopeBy = iota
	// byPath: the {namespace} segment of the path.
	byPath
	// byTask: the task {id}'s namespace.
	byTask
	// byStep: the step {id}'s namespace.
	byStep
	// byWebhook: the webhook {id}'s namespace (one that follows every
	// namespace needs the permission in all of them).
	byWebhook
	// byWorker: a remote worker's route. The engine refuses a worker the
	// credential does not own, and the worker holds only steps its claims
	// took, which the scope bounds (claim).
	byWorker
	// byHandler: the handler bounds what it reads and writes with
	// requestScope.
	byHandler
	// everywhere: the permission must hold in every namespace (the
	// operator log spans them all).
	everywhere
)

var scopeNames = [...]string{scopeUnset: "", byPath: "path", byTask: "task", byStep: "step", byWebhook: "webhook", byWorker: "worker",
	byHandler: "handler", everywhere: "everywhere"}

func (b scopeBy) String() string { return scopeNames[b] }

// scopeCheck is a request's scope, and whether its handler read it.
type scopeCheck struct {
	scope Scope
	read  atomic.Bool
}

type scopeKey struct{}

// requestScope returns where the request's credential may use the
// route's permission.
func requestScope(r *http.Request) Scope { return scopeFrom(r.Context()) }

// scopeFrom returns where the credential of the request or call whose
// context ctx is may use its route's or procedure's permission, and marks
// the scope read.
func scopeFrom(ctx context.Context) Scope {
	c, ok := ctx.Value(scopeKey{}).(*scopeCheck)
	if !ok {
		// A route outside wrap (none today) acts nowhere.
		return Scope{}
	}
	c.read.Store(true)
	return c.scope
}

// target is what a request names where its route's namespace is known:
// the namespace of a byPath route, the id of a byTask, byStep or byWebhook
// one. Each transport reads it from its own request (the REST path, a
// gRPC message).
type target struct {
	namespace string
	id        int64
}

// withScope puts the principal's scope of the route's permission in the
// request, and checks it where the route says its namespace is known.
func (s *Server) withScope(r *http.Request, rt route, p Principal) (*http.Request, *scopeCheck, error) {
	var t target
	var err error
	switch rt.scope {
	case byPath:
		t.namespace = r.PathValue("namespace")
	case byTask, byStep, byWebhook:
		t.id, err = pathID(r, "id")
	}
	ctx, c := withScopeCheck(r.Context(), p.Scope(rt.perm))
	r = r.WithContext(ctx)
	if err != nil && !c.scope.All {
		return r, c, err
	}
	if err := s.checkTarget(r.Context(), rt.perm, rt.scope, c.scope, t); err != nil {
		if errors.Is(err, errNoScope) {
			return r, c, fmt.Errorf("route %s %s: %w", rt.method, rt.path, err)
		}
		return r, c, err
	}
	return r, c, nil
}

// withScopeCheck puts scope sc in ctx, for scopeFrom.
func withScopeCheck(ctx context.Context, sc Scope) (context.Context, *scopeCheck) {
	c := &scopeCheck{scope: sc}
	return context.WithValue(ctx, scopeKey{}, c), c
}

// errNoScope is the error of a route or procedure that declares no scope.
var errNoScope = errors.New("no scope declared")

// checkTarget checks scope sc, the credential's scope of permission perm,
// at t where by says the namespace is known: the one scope check of every
// transport. What lies outside is not found.
func (s *Server) checkTarget(ctx context.Context, perm string, by scopeBy, sc Scope, t target) error {
	if by == scopeUnset {
		return errNoScope
	}
	if sc.All {
		return nil
	}
	switch by {
	case byPath:
		if !sc.Has(t.namespace) {
			return fmt.Errorf("namespace %s: %w", t.namespace, store.ErrNotFound)
		}
	case byTask:
		in, err := s.engine.List(ctx, weft.TaskFilter{IDs: []int64{t.id}, Namespaces: sc.Namespaces, Limit: 1})
		if err != nil {
			return err
		}
		if len(in) == 0 {
			return fmt.Errorf("task %d: %w", t.id, store.ErrNotFound)
		}
	case byStep:
		st, err := s.engine.Step(ctx, t.id)
		if err != nil {
			return err
		}
		if !sc.Has(st.Namespace) {
			return fmt.Errorf("step %d: %w", t.id, store.ErrNotFound)
		}
	case byWebhook:
		ws, err := s.engine.Webhooks(ctx)
		if err != nil {
			return err
		}
		for _, w := range ws {
			if ns := webhookNamespace(w.Namespace, w.Workflow); w.ID == t.id && ns != "" && sc.Has(ns) {
				return nil
			}
		}
		return fmt.Errorf("webhook %d: %w", t.id, store.ErrNotFound)
	case everywhere:
		return errorf(http.StatusForbidden, CodeForbidden, "permission %s is required in every namespace (this key holds it in %s)", perm, sc)
	case byWorker, byHandler:
	default:
		return errNoScope
	}
	return nil
}

// outOfScope is the refusal of a write into namespace ns that the caller
// named (field) and may not act in.
func outOfScope(field, ns string, sc Scope) error {
	e := errorf(http.StatusForbidden, CodeForbidden, "%s: namespace %q is outside this credential's namespaces (%s)", field, ns, sc)
	e.Field = field
	return e
}

// checkScope refuses namespace ns, named by the request's field, unless
// the request's scope holds there.
func checkScope(ctx context.Context, field, ns string) error {
	sc := scopeFrom(ctx)
	if sc.Has(ns) {
		return nil
	}
	return outOfScope(field, ns, sc)
}

// visible keeps the items whose namespace the request's scope holds.
func visible[T any](r *http.Request, items []T, namespace func(T) string) []T {
	return Visible(requestScope(r), items, namespace)
}
