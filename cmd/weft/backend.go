package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/user"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/client"
	"github.com/weftrun/weft/weftdb"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/workflow"
)

// backend is what the task commands (submit, tasks, task, cancel, retry)
// need: a local engine on the database, or a weft server through its API
// when --server or $WEFT_SERVER is set.
type backend interface {
	Submit(ctx context.Context, s weft.Submission) (client.SubmitResult, error)
	Get(ctx context.Context, id int64) (*wire.Task, error)
	List(ctx context.Context, f weft.TaskFilter) ([]wire.Task, error)
	Audit(ctx context.Context, id int64) ([]wire.AuditEntry, error)
	// Cancel and Retry record reason, and who acted, in the audit trail.
	Cancel(ctx context.Context, id int64, reason string) error
	Retry(ctx context.Context, id int64, reason string) error
	// Signal sends a signal with a JSON payload (nil is null) and reports
	// whether a waiting step took it.
	Signal(ctx context.Context, id int64, name string, payload json.RawMessage) (bool, error)
	// Step returns one step; RetryStep and ResolveStep act on it (a
	// non-empty result is what its dependents see).
	Step(ctx context.Context, id int64) (*wire.Step, error)
	RetryStep(ctx context.Context, id int64, reason string) error
	ResolveStep(ctx context.Context, id int64, result json.RawMessage, reason string) error
	// RegisterTemplate registers a template loaded from path.
	RegisterTemplate(ctx context.Context, path string, w *workflow.Workflow) error
	// Webhooks: create (the result carries the secret), list, delete and
	// enable.
	AddWebhook(ctx context.Context, spec weft.WebhookSpec) (wire.Webhook, error)
	ListWebhooks(ctx context.Context) ([]wire.Webhook, error)
	RemoveWebhook(ctx context.Context, id int64) error
	ResumeWebhook(ctx context.Context, id int64) error
	// Where names the database or server, for messages.
	Where() string
	Close()
}

// localBackend is an engine on the database, not started.
type localBackend struct {
	*dbEngine
	a *app
}

func (l localBackend) RegisterTemplate(ctx context.Context, path string, w *workflow.Workflow) error {
	return l.a.register(ctx, l.Engine, path, w)
}
func (l localBackend) Cancel(ctx context.Context, id int64, reason string) error {
	return l.Engine.CancelAs(ctx, id, weft.Operator{Actor: cliActor(), Reason: reason})
}
func (l localBackend) Retry(ctx context.Context, id int64, reason string) error {
	return l.Engine.RetryAs(ctx, id, weft.Operator{Actor: cliActor(), Reason: reason})
}

func (l localBackend) Signal(ctx context.Context, id int64, name string, payload json.RawMessage) (bool, error) {
	var body any
	if payload != nil {
		body = payload
	}
	return l.Engine.SignalAs(ctx, id, name, body, weft.Operator{Actor: cliActor()})
}
func (l localBackend) RetryStep(ctx context.Context, id int64, reason string) error {
	return l.Engine.RetryStep(ctx, id, weft.Operator{Actor: cliActor(), Reason: reason})
}
func (l localBackend) ResolveStep(ctx context.Context, id int64, result json.RawMessage, reason string) error {
	return l.Engine.ResolveStep(ctx, weft.StepResolution{StepID: id, EngineID: cliActor(), Reason: reason, Result: result})
}

func (l localBackend) AddWebhook(ctx context.Context, spec weft.WebhookSpec) (wire.Webhook, error) {
	w, err := l.Engine.CreateWebhook(ctx, spec, weft.Operator{Actor: cliActor()})
	return wire.WebhookOf(w), err
}
func (l localBackend) ListWebhooks(ctx context.Context) ([]wire.Webhook, error) {
	ws, err := l.Engine.Webhooks(ctx)
	return wire.List(ws, wire.WebhookOf), err
}

// The reads of a local backend answer with the API's records, as a
// server does.
func (l localBackend) Submit(ctx context.Context, s weft.Submission) (client.SubmitResult, error) {
	res, err := l.Engine.Submit(ctx, s)
	return client.SubmitResult{Task: wire.TaskOf(res.Task), Duplicate: res.Duplicate, Superseded: res.Superseded}, err
}
func (l localBackend) Get(ctx context.Context, id int64) (*wire.Task, error) {
	t, err := l.Engine.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	w := wire.TaskOf(*t)
	return &w, nil
}
func (l localBackend) List(ctx context.Context, f weft.TaskFilter) ([]wire.Task, error) {
	ts, err := l.Engine.List(ctx, f)
	return wire.List(ts, wire.TaskOf), err
}
func (l localBackend) Audit(ctx context.Context, id int64) ([]wire.AuditEntry, error) {
	trail, err := l.Engine.Audit(ctx, id)
	return wire.List(trail, wire.AuditEntryOf), err
}
func (l localBackend) Step(ctx context.Context, id int64) (*wire.Step, error) {
	s, err := l.Engine.Step(ctx, id)
	if err != nil {
		return nil, err
	}
	w := wire.StepOf(*s)
	return &w, nil
}
func (l localBackend) RemoveWebhook(ctx context.Context, id int64) error {
	return l.Engine.DeleteWebhook(ctx, id, weft.Operator{Actor: cliActor()})
}
func (l localBackend) ResumeWebhook(ctx context.Context, id int64) error {
	return l.Engine.EnableWebhook(ctx, id, weft.Operator{Actor: cliActor()})
}

// cliActor names the operator of a local command in the audit trail:
// "cli:" and the OS user.
func cliActor() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = "unknown"
	}
	return "cli:" + name
}

func (l localBackend) Where() string { return weftdb.Redact(l.a.dbURL()) }
func (l localBackend) Close()        { l.a.closeEngine(l.dbEngine) }

// remoteBackend is a weft server.
type remoteBackend struct {
	*client.Client
	url string
}

func (r remoteBackend) RegisterTemplate(ctx context.Context, path string, _ *workflow.Workflow) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return usageErrorf("%v", err)
	}
	if _, err := r.Client.RegisterTemplate(ctx, path, data); err != nil {
		return fmt.Errorf("register %s on %s: %w", path, r.url, err)
	}
	return nil
}

// Submit submits through the server.
func (r remoteBackend) Submit(ctx context.Context, s weft.Submission) (client.SubmitResult, error) {
	req := wire.SubmitRequest{Workflow: s.Workflow, IdempotencyKey: s.Key, Priority: s.Priority, OnConflict: string(s.OnConflict), Tags: s.Tags}
	switch in := s.Input.(type) {
	case nil:
	case json.RawMessage:
		req.Input = in
	default:
		b, err := json.Marshal(in)
		if err != nil {
			return client.SubmitResult{}, usageErrorf("--input: %v", err)
		}
		req.Input = b
	}
	if !s.RunAt.IsZero() {
		req.RunAt = &s.RunAt
	}
	if !s.GoodUntil.IsZero() {
		req.GoodUntil = &s.GoodUntil
	}
	return r.Client.Submit(ctx, req)
}

func (r remoteBackend) RetryStep(ctx context.Context, id int64, reason string) error {
	_, err := r.Client.RetryStep(ctx, id, reason)
	return err
}
func (r remoteBackend) ResolveStep(ctx context.Context, id int64, result json.RawMessage, reason string) error {
	_, err := r.Client.ResolveStep(ctx, id, result, reason)
	return err
}

func (r remoteBackend) AddWebhook(ctx context.Context, spec weft.WebhookSpec) (wire.Webhook, error) {
	return r.Client.CreateWebhook(ctx, wire.CreateWebhook{URL: spec.URL, Namespace: spec.Namespace, Workflow: spec.Workflow, Types: spec.Types})
}
func (r remoteBackend) ListWebhooks(ctx context.Context) ([]wire.Webhook, error) {
	return r.Client.Webhooks(ctx)
}
func (r remoteBackend) RemoveWebhook(ctx context.Context, id int64) error {
	return r.Client.DeleteWebhook(ctx, id)
}
func (r remoteBackend) ResumeWebhook(ctx context.Context, id int64) error {
	_, err := r.Client.EnableWebhook(ctx, id)
	return err
}

func (r remoteBackend) Where() string { return weftdb.Redact(r.url) }
func (r remoteBackend) Close()        {}

// serverURL returns the server the commands talk to, or "".
func (a *app) serverURL() string {
	if a.serverFlag != "" {
		return a.serverFlag
	}
	return a.getenv("WEFT_SERVER")
}

// token returns the credential sent to the server.
func (a *app) token() string {
	if a.tokenFlag != "" {
		return a.tokenFlag
	}
	return a.getenv("WEFT_TOKEN")
}

// serverClient returns a client of the configured server (serverURL).
func (a *app) serverClient() (*client.Client, error) {
	url := a.serverURL()
	c, err := client.New(url, a.token())
	if err != nil {
		// Not err, which quotes the URL as it is.
		return nil, usageErrorf("%s: server URL %q: want http://HOST:PORT or https://HOST", a.config.Describe("server"), a.config.Show("server", url))
	}
	return c, nil
}

// backend opens the local database (see access) or, with a
// server configured, a client of it.
func (a *app) backend(ctx context.Context, how access) (backend, error) {
	if url := a.serverURL(); url != "" {
		c, err := a.serverClient()
		if err != nil {
			return nil, err
		}
		return remoteBackend{Client: c, url: url}, nil
	}
	e, err := a.open(ctx, weft.Config{}, how)
	if err != nil {
		return nil, err
	}
	return localBackend{dbEngine: e, a: a}, nil
}
