package client

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"

	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/wire/weftv1/weftv1connect"
)

// GRPCClient talks to a weft server's gRPC API (docs/grpc.md): the task
// operations of Client, over gRPC. Its errors are *Error, as Client's
// are, with the HTTP status of the gRPC code.
type GRPCClient struct {
	tasks weftv1connect.TaskServiceClient
	token string
}

// NewGRPC returns a gRPC client of the server at baseURL: "http://HOST:PORT"
// speaks HTTP/2 without TLS, "https://HOST" with it. token authenticates
// (an API key or a JWT; "" sends none).
func NewGRPC(baseURL, token string) (*GRPCClient, error) {
	hc, base, err := grpcHTTP(baseURL)
	if err != nil {
		return nil, err
	}
	return &GRPCClient{tasks: weftv1connect.NewTaskServiceClient(hc, base, connect.WithGRPC()), token: token}, nil
}

// grpcHTTP is the HTTP client gRPC needs for baseURL: HTTP/2, cleartext
// for http://.
func grpcHTTP(baseURL string) (*http.Client, string, error) {
	u, err := serverURL(baseURL)
	if err != nil {
		return nil, "", err
	}
	var p http.Protocols
	if u.Scheme == "http" {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP2(true)
	}
	tr := &http.Transport{Protocols: &p, TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}, Proxy: http.ProxyFromEnvironment}
	return &http.Client{Transport: tr}, strings.TrimRight(baseURL, "/"), nil
}

// request is msg with the credential and the caller's trace.
func request[T any](ctx context.Context, msg *T, token string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header()))
	return req
}

// grpcError is err as an *Error, with the code and field of its detail;
// an error that is not the server's (a broken connection, a cancelled
// context) is returned as it is.
func grpcError(err error) error {
	var ce *connect.Error
	if err == nil || !errors.As(err, &ce) || ce.Code() == connect.CodeCanceled {
		return err
	}
	e := &Error{Status: http.StatusInternalServerError, Code: wire.CodeInternal, Message: ce.Message()}
	if s, ok := weftv1.HTTPStatus(ce.Code()); ok {
		e.Status = s
	}
	if ce.Code() == connect.CodeUnavailable && len(ce.Details()) == 0 {
		// No detail: the connection's, not the API's.
		return err
	}
	for _, d := range ce.Details() {
		if v, derr := d.Value(); derr == nil {
			if ed, ok := v.(*weftv1.ErrorDetail); ok {
				e.Code, e.Field = ed.GetCode(), ed.GetField()
			}
		}
	}
	return e
}

// Submit creates a task, as Client.Submit does.
func (c *GRPCClient) Submit(ctx context.Context, req wire.SubmitRequest) (SubmitResult, error) {
	res, err := c.tasks.Submit(ctx, request(ctx, weftv1.SubmitRequestOf(req), c.token))
	if err != nil {
		return SubmitResult{}, grpcError(err)
	}
	w := res.Msg.Wire()
	return SubmitResult{Task: w.Task, Duplicate: w.Duplicate, Superseded: w.Superseded}, nil
}

// Get returns a task with its steps (the fields of the gRPC Task).
func (c *GRPCClient) Get(ctx context.Context, id int64) (*wire.Task, error) {
	res, err := c.tasks.GetTask(ctx, request(ctx, &weftv1.GetTaskRequest{Id: id}, c.token))
	if err != nil {
		return nil, grpcError(err)
	}
	t := res.Msg.GetTask().Wire()
	return &t, nil
}

// List returns one page of tasks, newest first, and the cursor of the
// next ("" on the last).
func (c *GRPCClient) List(ctx context.Context, f *weftv1.ListTasksRequest) ([]wire.Task, string, error) {
	res, err := c.tasks.ListTasks(ctx, request(ctx, f, c.token))
	if err != nil {
		return nil, "", grpcError(err)
	}
	out := make([]wire.Task, len(res.Msg.GetTasks()))
	for i, t := range res.Msg.GetTasks() {
		out[i] = t.Wire()
	}
	return out, res.Msg.GetNextCursor(), nil
}

// Cancel cancels a task; reason, if not empty, is recorded in its audit
// trail.
func (c *GRPCClient) Cancel(ctx context.Context, id int64, reason string) error {
	_, err := c.tasks.CancelTask(ctx, request(ctx, &weftv1.CancelTaskRequest{Id: id, Reason: reason}, c.token))
	return grpcError(err)
}
