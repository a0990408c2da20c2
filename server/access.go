package server

import (
	"context"
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
func requestScope(r *http.Request) Scope {
	c, ok := r.Context().Value(scopeKey{}).(*scopeCheck)
	if !ok {
		// A route outside wrap (none today) acts nowhere.
		return Scope{}
	}
	c.read.Store(true)
	return c.scope
}

// scopeNamespaces is the scope as a store filter's Namespaces: nil for
// every namespace.
func scopeNamespaces(sc Scope) []string {
	if sc.All {
		return nil
	}
	return sc.Namespaces
}

// withScope puts the principal's scope of the route's permission in the
// request, and checks it where the route says its namespace is known.
func (s *Server) withScope(r *http.Request, rt route, p Principal) (*http.Request, *scopeCheck, error) {
	c := &scopeCheck{scope: p.Scope(rt.perm)}
	r = r.WithContext(context.WithValue(r.Context(), scopeKey{}, c))
	if c.scope.All {
		return r, c, nil
	}
	switch rt.scope {
	case byPath:
		ns := r.PathValue("namespace")
		if !c.scope.Has(ns) {
			return r, c, fmt.Errorf("namespace %s: %w", ns, store.ErrNotFound)
		}
	case byTask:
		id, err := pathID(r, "id")
		if err != nil {
			return r, c, err
		}
		in, err := s.engine.List(r.Context(), weft.TaskFilter{IDs: []int64{id}, Namespaces: c.scope.Namespaces, Limit: 1})
		if err != nil {
			return r, c, err
		}
		if len(in) == 0 {
			return r, c, fmt.Errorf("task %d: %w", id, store.ErrNotFound)
		}
	case byStep:
		id, err := pathID(r, "id")
		if err != nil {
			return r, c, err
		}
		st, err := s.engine.Step(r.Context(), id)
		if err != nil {
			return r, c, err
		}
		if !c.scope.Has(st.Namespace) {
			return r, c, fmt.Errorf("step %d: %w", id, store.ErrNotFound)
		}
	case byWebhook:
		id, err := pathID(r, "id")
		if err != nil {
			return r, c, err
		}
		ws, err := s.engine.Webhooks(r.Context())
		if err != nil {
			return r, c, err
		}
		for _, w := range ws {
			if ns := webhookNamespace(w.Namespace, w.Workflow); w.ID == id && ns != "" && c.scope.Has(ns) {
				return r, c, nil
			}
		}
		return r, c, fmt.Errorf("webhook %d: %w", id, store.ErrNotFound)
	case everywhere:
		return r, c, errorf(http.StatusForbidden, CodeForbidden, "permission %s is required in every namespace (this key holds it in %s)",
			rt.perm, c.scope)
	case byWorker, byHandler:
	default:
		return r, c, fmt.Errorf("route %s %s: no scope declared", rt.method, rt.path)
	}
	return r, c, nil
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
func checkScope(r *http.Request, field, ns string) error {
	sc := requestScope(r)
	if sc.Has(ns) {
		return nil
	}
	return outOfScope(field, ns, sc)
}

// visible keeps the items whose namespace the request's scope holds.
func visible[T any](r *http.Request, items []T, namespace func(T) string) []T {
	return Visible(requestScope(r), items, namespace)
}
