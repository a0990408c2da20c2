package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/workflow"
)

// Definitions holds the workflow versions an engine registered or read,
// decoded (a version's definition never changes once stored, so each is
// read and decoded once), and applies a step's definition to the end of
// its attempts (outcome.go).
type Definitions struct {
	e         *Engine
	mu        sync.Mutex
	workflows map[string]*workflow.Workflow // by Ref
	reading   map[string]chan struct{}      // versions being read, by Ref; closed when read
	conds     conditions                    // compiled step conditions
}

// Register validates a workflow version and records it in the store, with
// its schedules (which become the workflow's unless a newer version is
// registered). The
// same definition may be registered again; a different definition under an
// existing version is refused with ErrConflict. Steps may name handlers that
// are not registered yet.
// It returns the version as stored and whether this call created it.
func (d *Definitions) Register(ctx context.Context, w *workflow.Workflow) (store.WorkflowRecord, bool, error) {
	if err := w.Validate(); err != nil {
		return store.WorkflowRecord{}, false, fmt.Errorf("%w workflow: %w", store.ErrInvalid, err)
	}
	def, err := json.Marshal(w)
	if err != nil {
		return store.WorkflowRecord{}, false, fmt.Errorf("encode workflow %s: %w", w.Ref(), err)
	}
	rec, created, err := d.e.store.PutWorkflow(ctx, store.WorkflowRecord{Namespace: w.Namespace, Name: w.Name, Version: w.Version, Definition: def})
	if err != nil {
		return store.WorkflowRecord{}, false, fmt.Errorf("register %s: %w", w.Ref(), err)
	}
	d.mu.Lock()
	d.workflows[w.Ref()] = w
	d.mu.Unlock()
	if err := d.e.schedules.sync(ctx, w, d.e.clock()); err != nil {
		return store.WorkflowRecord{}, false, err
	}
	return rec, created, nil
}

// Registered returns a registered workflow version as stored; version ""
// means the newest.
func (d *Definitions) Registered(ctx context.Context, namespace, name, version string) (*store.WorkflowRecord, error) {
	return d.e.store.GetWorkflow(ctx, namespace, name, version)
}

// Workflows lists the registered workflow versions.
func (d *Definitions) Workflows(ctx context.Context) ([]store.WorkflowRecord, error) {
	return d.e.store.ListWorkflows(ctx)
}

// MissingHandlers lists the handlers a workflow names that this engine has
// not registered.
func (d *Definitions) MissingHandlers(w *workflow.Workflow) []string {
	d.e.exec.mu.Lock()
	defer d.e.exec.mu.Unlock()
	var missing []string
	seen := map[string]bool{}
	for _, s := range append(slices.Clip(w.Steps), w.Templates...) {
		if s.Type == workflow.StepSignal || s.Type == workflow.StepWorkflow {
			continue // runs no handler of the user's
		}
		if d.e.exec.handlers[s.Handler] == nil && !seen[s.Handler] {
			seen[s.Handler] = true
			missing = append(missing, s.Handler)
		}
	}
	return missing
}

// Workflow returns a registered workflow; version "" means the newest.
func (d *Definitions) Workflow(ctx context.Context, namespace, name, version string) (*workflow.Workflow, error) {
	return d.get(ctx, namespace, name, version)
}

// get returns a registered workflow, decoded once; version "" means the
// newest. Of the callers that want a version not decoded yet, one reads
// it and the others wait for it: an engine that starts with a hundred free
// slots claims a hundred steps of one version at once.
func (d *Definitions) get(ctx context.Context, namespace, name, version string) (*workflow.Workflow, error) {
	if version == "" {
		return d.read(ctx, namespace, name, version)
	}
	ref := versionRef(namespace, name, version)
	for {
		d.mu.Lock()
		if w := d.workflows[ref]; w != nil {
			d.mu.Unlock()
			return w, nil
		}
		wait, busy := d.reading[ref]
		if !busy {
			done := make(chan struct{})
			d.reading[ref] = done
			d.mu.Unlock()
			defer func() {
				d.mu.Lock()
				delete(d.reading, ref)
				d.mu.Unlock()
				close(done)
			}()
			return d.read(ctx, namespace, name, version)
		}
		d.mu.Unlock()
		// Read again if the reader failed (its context may have ended).
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-wait:
		}
	}
}

// read reads a workflow version from the store and decodes it, unless the
// engine decoded it before; version "" means the newest.
func (d *Definitions) read(ctx context.Context, namespace, name, version string) (*workflow.Workflow, error) {
	rec, err := d.e.store.GetWorkflow(ctx, namespace, name, version)
	if err != nil {
		return nil, err
	}
	// A version's definition never changes once stored: the newest,
	// decoded before, is decoded again only if the engine has not yet.
	if w := d.decoded(namespace, name, rec.Version); w != nil {
		return w, nil
	}
	var w workflow.Workflow
	if err := json.Unmarshal(rec.Definition, &w); err != nil {
		return nil, fmt.Errorf("decode stored workflow %s/%s@%s: %w", namespace, name, rec.Version, err)
	}
	d.mu.Lock()
	d.workflows[w.Ref()] = &w
	d.mu.Unlock()
	return &w, nil
}

// decoded returns the workflow version the engine registered or decoded
// before, or nil (always for version "", the newest, which only the store
// knows).
func (d *Definitions) decoded(namespace, name, version string) *workflow.Workflow {
	if version == "" {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.workflows[versionRef(namespace, name, version)]
}

// versionRef is the Ref of a workflow version (workflow.Workflow.Ref),
// the key of the versions an engine holds.
func versionRef(namespace, name, version string) string {
	return namespace + "/" + name + "@" + version
}
