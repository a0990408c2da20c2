package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/weftrun/weft/store"
)

// This file holds the one rule every operator action that names a target
// follows: the target exists, or the action is ErrNotFound and changes
// nothing. A namespace exists when a workflow is registered in it, a
// workflow when a version of it is; a task or step when its row does (the
// store's own actions say so). A typo ("shpo") is then an error at every
// way in, instead of a success that changed what nobody has.

// requireTarget checks the target of a policy change: AllTargets, a
// namespace or a namespace/workflow. A target that has a policy already
// exists as such, so that a policy whose workflows are gone can still be
// undone.
func (a *Admin) requireTarget(ctx context.Context, target string) error {
	ns, name, err := store.ParseTarget(target)
	if err != nil || target == store.TargetAll {
		return err
	}
	missing := a.requireWorkflow(ctx, ns, name)
	if !errors.Is(missing, store.ErrNotFound) {
		return missing
	}
	report, err := a.store.ListPolicies(ctx)
	if err != nil {
		return fmt.Errorf("list policies: %w", err)
	}
	for _, p := range report.Policies {
		if p.Target == target {
			return nil
		}
	}
	return missing
}

// requireRetentionNamespace checks the namespace of a retention change: it
// exists, or a retention is set on it already (so that it can be undone).
func (a *Admin) requireRetentionNamespace(ctx context.Context, namespace string) error {
	missing := a.requireWorkflow(ctx, namespace, "")
	if !errors.Is(missing, store.ErrNotFound) {
		return missing
	}
	rs, err := a.store.Retentions(ctx)
	if err != nil {
		return fmt.Errorf("list retentions: %w", err)
	}
	for _, r := range rs {
		if r.Namespace == namespace {
			return nil
		}
	}
	return missing
}

// requireWorkflow returns ErrNotFound unless a workflow is registered in
// namespace (with name, when name is not "").
func (a *Admin) requireWorkflow(ctx context.Context, namespace, name string) error {
	ok, err := a.store.WorkflowExists(ctx, namespace, name)
	switch {
	case err != nil:
		return err
	case ok:
		return nil
	case name == "":
		return fmt.Errorf("namespace %s: %w: no workflow is registered in it", namespace, store.ErrNotFound)
	case namespace == "":
		return fmt.Errorf("workflow %s: %w in any namespace", name, store.ErrNotFound)
	}
	if known, kerr := a.store.WorkflowExists(ctx, namespace, ""); kerr == nil && !known {
		return fmt.Errorf("workflow %s/%s: %w: no workflow is registered in namespace %s", namespace, name, store.ErrNotFound, namespace)
	}
	return fmt.Errorf("workflow %s/%s: %w", namespace, name, store.ErrNotFound)
}

// RequireFilter checks the namespace and workflow a task filter names.
// A filter bound to Namespaces finds only what is there: a namespace or
// workflow elsewhere is not found, as one that does not exist.
func (a *Admin) RequireFilter(ctx context.Context, f store.TaskFilter) error {
	switch {
	case f.Namespace == "" && f.Workflow == "":
		return nil
	case f.Namespaces == nil:
		return a.requireWorkflow(ctx, f.Namespace, f.Workflow)
	case f.Namespace != "":
		if !slices.Contains(f.Namespaces, f.Namespace) {
			return fmt.Errorf("namespace %s: %w: no workflow is registered in it", f.Namespace, store.ErrNotFound)
		}
		return a.requireWorkflow(ctx, f.Namespace, f.Workflow)
	}
	for _, ns := range f.Namespaces {
		ok, err := a.store.WorkflowExists(ctx, ns, f.Workflow)
		if err != nil || ok {
			return err
		}
	}
	return fmt.Errorf("workflow %s: %w in any namespace", f.Workflow, store.ErrNotFound)
}

// requireTasks returns ErrNotFound naming the tasks of ids that do not
// exist.
func (a *Admin) requireTasks(ctx context.Context, ids []int64, namespaces []string) error {
	var missing []int64
	for chunk := range slices.Chunk(ids, DefaultBatchSize) {
		found := map[int64]bool{}
		if namespaces == nil {
			states, err := a.store.TaskStates(ctx, chunk)
			if err != nil {
				return err
			}
			for id := range states {
				found[id] = true
			}
		} else {
			// Where the caller may not look, a task is not found.
			in, err := a.store.MatchTasks(ctx, store.TaskFilter{IDs: chunk, Namespaces: namespaces}, len(chunk))
			if err != nil {
				return err
			}
			for _, id := range in {
				found[id] = true
			}
		}
		for _, id := range chunk {
			if !found[id] {
				missing = append(missing, id)
			}
		}
	}
	switch {
	case len(missing) == 0:
		return nil
	case len(missing) == 1:
		return fmt.Errorf("task %d: %w", missing[0], store.ErrNotFound)
	case len(missing) <= 10:
		return fmt.Errorf("tasks %v: %w", missing, store.ErrNotFound)
	}
	return fmt.Errorf("%d tasks (%v, …): %w", len(missing), missing[:10], store.ErrNotFound)
}
