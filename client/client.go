// Package client is a Go client of the weft REST API (weft serve): submit,
// inspect, cancel and retry tasks, register and validate workflow templates.
//
// Requests and responses are the types of package wire, which the server
// uses too. Errors from the API are *Error and wrap store.ErrNotFound (404),
// store.ErrConflict (409) or store.ErrInvalid (400) — the same values as
// weft.ErrNotFound, weft.ErrConflict and weft.ErrInvalid — so callers test
// them with errors.Is as they would the engine's. The package links no
// database driver and no engine: it builds with CGO_ENABLED=0.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
	"go.opentelemetry.io/otel/propagation"
)

// Client talks to one weft server.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// New returns a client of the server at baseURL ("http://host:port"),
// authenticating with token (an API key or a JWT; "" sends none).
func New(baseURL, token string) (*Client, error) {
	if _, err := serverURL(baseURL); err != nil {
		return nil, err
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: &http.Client{Timeout: time.Minute}}, nil
}

// serverURL parses the base URL of a server, for REST and gRPC alike.
func serverURL(baseURL string) (*url.URL, error) {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q: want http://HOST:PORT or https://HOST (a path is kept; a query or fragment is not)", baseURL)
	}
	return u, nil
}

// Error is an error response of the API, with its HTTP status.
type Error struct {
	Status   int
	Code     string
	Message  string
	Field    string
	Problems []Problem
}

// Problem is one problem of a template.
type Problem = wire.Problem

// Error returns the API's message ("task 7: not found").
func (e *Error) Error() string { return e.Message }

// Unwrap maps the status to the engine's errors.
func (e *Error) Unwrap() error {
	if e.Code == codeNotWeft {
		// Not weft's answer (a proxy's page, a wrong base path): a 404
		// says nothing of the task.
		return nil
	}
	switch e.Status {
	case http.StatusNotFound:
		return store.ErrNotFound
	case http.StatusConflict:
		if e.Code == wire.CodeConflict {
			return &store.ConflictError{Reason: e.Message}
		}
		return store.ErrConflict
	case http.StatusBadRequest:
		if e.Field != "" {
			return &store.FieldError{Field: e.Field, Problem: strings.TrimPrefix(e.Message, e.Field+": ")}
		}
		return store.ErrInvalid
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, fmt.Errorf("encode request: %w", err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return 0, fmt.Errorf("request %s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// The caller's trace goes along: a task submitted continues it.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.http.Do(req)
	if err != nil {
		// A *url.Error names the method and URL itself.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return 0, fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode >= 400 {
		return resp.StatusCode, responseError(resp.StatusCode, method, path, data)
	}
	if err := c.checkAnswer(resp, method, path, data, out != nil); err != nil {
		return resp.StatusCode, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("decode response of %s %s: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// checkAnswer refuses a successful answer that is not weft's: weft answers
// JSON (or 204 with nothing, where no value is due). A proxy's page, an
// empty 200 or a server that is not weft would otherwise read as success.
func (c *Client) checkAnswer(resp *http.Response, method, path string, data []byte, want bool) error {
	if resp.StatusCode == http.StatusNoContent && !want {
		return nil
	}
	if err := c.notOfType(resp, method, path, "application/json"); err != nil {
		return err
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return c.notWeft(resp, method, path, "an empty body", "JSON")
	}
	return nil
}

// notOfType is the error of an answer whose media type is not want, nil
// for one that is.
func (c *Client) notOfType(resp *http.Response, method, path, want string) error {
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err == nil && mt == want {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if ct == "" {
		ct = "no content type"
	}
	kind := map[string]string{"application/json": "JSON", "text/event-stream": "event stream"}[want]
	return c.notWeft(resp, method, path, fmt.Sprintf("%q", ct), kind)
}

// notWeft is the error of an answer (what it held) that is not weft's
// (kind: what weft answers there).
func (c *Client) notWeft(resp *http.Response, method, path, what, kind string) *Error {
	return &Error{Status: resp.StatusCode, Code: codeNotWeft,
		Message: fmt.Sprintf("%s %s: the server answered %d with %s, not weft's %s: is %s a weft server?", method, path, resp.StatusCode, what, kind, c.base)}
}

// codeNotWeft is the Code of an *Error for an answer that is not weft's.
const codeNotWeft = "not_weft"

// responseError is the *Error of an error response with the given body.
func responseError(status int, method, path string, body []byte) *Error {
	var e wire.ErrorBody
	if json.Unmarshal(body, &e) != nil || e.Error.Code == "" {
		return &Error{Status: status, Code: codeNotWeft, Message: fmt.Sprintf("%s %s: status %d", method, path, status)}
	}
	return &Error{Status: status, Code: e.Error.Code, Message: e.Error.Message, Field: e.Error.Field, Problems: e.Error.Problems}
}

// Workflow is a registered workflow version.
type Workflow = wire.Workflow

// RegisterTemplate registers a YAML template; filename names it in problems.
func (c *Client) RegisterTemplate(ctx context.Context, filename string, yaml []byte) (Workflow, error) {
	var w Workflow
	_, err := c.do(ctx, "POST", "/v1/workflows", wire.TemplateRequest{Template: string(yaml), Filename: filename}, &w)
	return w, err
}

// Validation is the result of validating a template.
type Validation = wire.Validation

// ValidateTemplate checks a template on the server without registering it.
func (c *Client) ValidateTemplate(ctx context.Context, filename string, yaml []byte) (Validation, error) {
	var v Validation
	_, err := c.do(ctx, "POST", "/v1/workflows/validate", wire.TemplateRequest{Template: string(yaml), Filename: filename}, &v)
	return v, err
}

// SubmitResult is the task a submission created or, for a duplicate,
// found.
type SubmitResult struct {
	Task      wire.Task
	Duplicate bool
	// Superseded is the task whose idempotency key a supersede submission
	// took (0: none).
	Superseded int64
}

// Submit creates a task. A submission whose idempotency key exists returns
// the existing task with Duplicate set.
func (c *Client) Submit(ctx context.Context, req wire.SubmitRequest) (SubmitResult, error) {
	var t wire.SubmitResponse
	status, err := c.do(ctx, "POST", "/v1/tasks", req, &t)
	if err != nil {
		return SubmitResult{}, err
	}
	return SubmitResult{Task: t.Task, Duplicate: status == http.StatusOK, Superseded: t.Superseded}, nil
}

// SubmitMany submits up to wire.MaxBatch tasks in one request and one
// transaction: all of them or none (POST /v1/tasks/batch). The results are
// in the order of reqs. A refused task fails the call with an *Error whose
// Field names it by index: tasks[2].priority.
func (c *Client) SubmitMany(ctx context.Context, reqs []wire.SubmitRequest) ([]SubmitResult, error) {
	var out wire.SubmittedBatch
	if _, err := c.do(ctx, "POST", "/v1/tasks/batch", wire.SubmitBatch{Tasks: reqs}, &out); err != nil {
		return nil, err
	}
	res := make([]SubmitResult, len(out.Tasks))
	for i, t := range out.Tasks {
		res[i] = SubmitResult{Task: t.Task, Duplicate: t.Duplicate, Superseded: t.Superseded}
	}
	return res, nil
}

// Get returns a task with its steps.
func (c *Client) Get(ctx context.Context, id int64) (*wire.Task, error) {
	var t wire.Task
	if _, err := c.do(ctx, "GET", "/v1/tasks/"+strconv.FormatInt(id, 10), nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// List returns one page of tasks, newest first (BeforeID pages on). With
// f.Active each unfinished task's Active lists its ready, running and
// waiting steps.
func (c *Client) List(ctx context.Context, f store.TaskFilter) ([]wire.Task, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("namespace", f.Namespace)
	set("workflow", f.Workflow)
	set("state", string(f.State))
	set("key", f.Key)
	set("schedule", f.Schedule)
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.BeforeID > 0 {
		q.Set("cursor", strconv.FormatInt(f.BeforeID, 10))
	}
	if !f.CreatedAfter.IsZero() {
		q.Set("created_after", f.CreatedAfter.Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		q.Set("created_before", f.CreatedBefore.Format(time.RFC3339Nano))
	}
	for _, k := range sortedTagKeys(f.Tags) {
		q.Add("tag", k+"="+f.Tags[k])
	}
	if f.Attention {
		q.Set("attention", "true")
	}
	if f.Active {
		q.Set("active", "true")
	}
	var page wire.TaskList
	path := "/v1/tasks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	if _, err := c.do(ctx, "GET", path, nil, &page); err != nil {
		return nil, err
	}
	return page.Tasks, nil
}

// Audit returns a task's transitions, oldest first.
func (c *Client) Audit(ctx context.Context, id int64) ([]wire.AuditEntry, error) {
	var out wire.AuditList
	if _, err := c.do(ctx, "GET", "/v1/tasks/"+strconv.FormatInt(id, 10)+"/audit", nil, &out); err != nil {
		return nil, err
	}
	return out.Audit, nil
}

// Cancel cancels a task. reason, if not empty, is recorded in the task's
// audit trail with the client's credential.
func (c *Client) Cancel(ctx context.Context, id int64, reason string) error {
	_, err := c.do(ctx, "POST", "/v1/tasks/"+strconv.FormatInt(id, 10)+"/cancel", taskAction(reason), nil)
	return err
}

// Retry retries a failed task. reason, if not empty, is recorded in the
// task's audit trail with the client's credential.
func (c *Client) Retry(ctx context.Context, id int64, reason string) error {
	_, err := c.do(ctx, "POST", "/v1/tasks/"+strconv.FormatInt(id, 10)+"/retry", taskAction(reason), nil)
	return err
}

// taskAction is the body of a cancel or retry: none without a reason.
func taskAction(reason string) any {
	if reason == "" {
		return nil
	}
	return wire.TaskAction{Reason: reason}
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Signal sends a named signal with a JSON payload (nil sends null) to a
// task. It reports whether a waiting step took it at once; otherwise it
// is kept for the next step that begins to wait for it. A task that has
// ended is ErrConflict.
func (c *Client) Signal(ctx context.Context, taskID int64, name string, payload json.RawMessage) (bool, error) {
	var body any
	if len(payload) > 0 {
		body = wire.SignalRequest{Payload: payload}
	}
	var res wire.SignalResult
	_, err := c.do(ctx, "POST", "/v1/tasks/"+strconv.FormatInt(taskID, 10)+"/signals/"+url.PathEscape(name), body, &res)
	return res.Delivered, err
}

// Step returns one step of a task.
func (c *Client) Step(ctx context.Context, id int64) (*wire.Step, error) {
	var st wire.Step
	if _, err := c.do(ctx, "GET", "/v1/steps/"+strconv.FormatInt(id, 10), nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// RetryStep makes a failed or expired step ready again with fresh
// attempts; reason, if not empty, is recorded in the audit trail.
func (c *Client) RetryStep(ctx context.Context, id int64, reason string) (*wire.Step, error) {
	return c.stepAction(ctx, id, "retry", stepAction(reason))
}

// ResolveStep ends a step by hand: its dependents proceed. A non-empty
// result is what they see as its result.
func (c *Client) ResolveStep(ctx context.Context, id int64, result json.RawMessage, reason string) (*wire.Step, error) {
	if len(result) > 0 {
		return c.stepAction(ctx, id, "complete", wire.CompleteStep{Result: result, Reason: reason})
	}
	return c.stepAction(ctx, id, "resolve", stepAction(reason))
}

func (c *Client) stepAction(ctx context.Context, id int64, action string, body any) (*wire.Step, error) {
	var st wire.Step
	if _, err := c.do(ctx, "POST", "/v1/steps/"+strconv.FormatInt(id, 10)+"/"+action, body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// stepAction is the body of a step retry or resolve: none without a
// reason.
func stepAction(reason string) any {
	if reason == "" {
		return nil
	}
	return wire.StepAction{Reason: reason}
}
