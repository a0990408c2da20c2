package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"connectrpc.com/grpcreflect"

	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/wire/weftv1/weftv1connect"
)

// The gRPC API (proto/weft/v1, docs/grpc.md) is a second transport of the
// same operations: served by connect-go beside the REST routes, so that
// gRPC (over HTTP/2, cleartext or TLS), gRPC-Web and Connect clients all
// reach it on the API's port. Every procedure is declared in the
// procedure table below with its permission and where its namespace is
// known, as every REST route is; the interceptor authenticates the call
// with the REST authenticator, checks the permission and the scope with
// the same checkTarget, and the procedure converts its message to the
// wire type and calls the function its REST twin calls.

// procedure is one gRPC procedure, as route is one REST route.
type procedure struct {
	name  string // "/weft.v1.TaskService/Submit"
	perm  string
	scope scopeBy
	// target reads what the request names where the scope is checked
	// (byTask, byStep, byWebhook, byPath); unary procedures only.
	target func(msg any) target
	// stream marks a streaming procedure: no request timeout, and its
	// credential is checked again while it lasts.
	stream bool
}

// byID reads the target of a message with an id field.
func byID(msg any) target {
	m, ok := msg.(interface{ GetId() int64 })
	if !ok {
		return target{}
	}
	return target{id: m.GetId()}
}

func (s *Server) procedureTable() []procedure {
	return []procedure{
		{name: weftv1connect.TaskServiceSubmitProcedure, perm: PermTasksCreate, scope: byHandler},
		{name: weftv1connect.TaskServiceSubmitBatchProcedure, perm: PermTasksCreate, scope: byHandler},
		{name: weftv1connect.TaskServiceGetTaskProcedure, perm: PermTasksRead, scope: byTask, target: byID},
		{name: weftv1connect.TaskServiceListTasksProcedure, perm: PermTasksRead, scope: byHandler},
		{name: weftv1connect.TaskServiceCancelTaskProcedure, perm: PermTasksCancel, scope: byTask, target: byID},
		{name: weftv1connect.TaskServiceRetryTaskProcedure, perm: PermTasksRetry, scope: byTask, target: byID},
		{name: weftv1connect.TaskServiceSendSignalProcedure, perm: PermTasksSignal, scope: byTask, target: byID},
		{name: weftv1connect.TaskServiceWatchEventsProcedure, perm: PermTasksRead, scope: byHandler, stream: true},

		{name: weftv1connect.WorkerServiceRegisterProcedure, perm: PermWorkersConnect, scope: byHandler},
		{name: weftv1connect.WorkerServicePullProcedure, perm: PermWorkersConnect, scope: byHandler, stream: true},
		{name: weftv1connect.WorkerServiceHeartbeatProcedure, perm: PermWorkersConnect, scope: byWorker},
		{name: weftv1connect.WorkerServiceCompleteProcedure, perm: PermWorkersConnect, scope: byWorker},
		{name: weftv1connect.WorkerServiceFailProcedure, perm: PermWorkersConnect, scope: byWorker},
		{name: weftv1connect.WorkerServiceCallsProcedure, perm: PermWorkersConnect, scope: byWorker},
		{name: weftv1connect.WorkerServiceCheckpointProcedure, perm: PermWorkersConnect, scope: byWorker},
		{name: weftv1connect.WorkerServiceProgressProcedure, perm: PermWorkersConnect, scope: byWorker},
		{name: weftv1connect.WorkerServiceDeregisterProcedure, perm: PermWorkersConnect, scope: byWorker},
	}
}

// Procedure describes one gRPC procedure, for documentation and tests.
type Procedure struct {
	Name, Permission string
	// Scope is as Route's.
	Scope string
}

// Procedures lists the gRPC API's procedures.
func (s *Server) Procedures() []Procedure {
	table := s.procedureTable()
	out := make([]Procedure, len(table))
	for i, p := range table {
		out[i] = Procedure{Name: p.name, Permission: p.perm, Scope: p.scope.String()}
	}
	return out
}

// GRPCServices names the gRPC services the server serves.
var GRPCServices = []string{weftv1connect.TaskServiceName, weftv1connect.WorkerServiceName}

// mountGRPC serves the gRPC services and server reflection on s.mux.
func (s *Server) mountGRPC() {
	s.procs = map[string]procedure{}
	for _, p := range s.procedureTable() {
		s.procs[p.name] = p
	}
	opts := []connect.HandlerOption{
		connect.WithInterceptors(&grpcAccess{s: s}),
		connect.WithReadMaxBytes(int(min(s.opts.MaxBodyBytes, int64(^uint32(0)>>1)))),
		// An error's field and code ride in its details; the message is
		// REST's.
		connect.WithRecover(func(_ context.Context, spec connect.Spec, _ http.Header, p any) error {
			s.log.Error("procedure panicked", "procedure", spec.Procedure, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			return connect.NewError(connect.CodeInternal, errors.New("internal error"))
		}),
	}
	mount := func(path string, h http.Handler) { s.mux.Handle(path, s.guardBrowser(s.streamDeadlines(h))) }
	mount(weftv1connect.NewTaskServiceHandler(&grpcTasks{s: s}, opts...))
	mount(weftv1connect.NewWorkerServiceHandler(&grpcWorkers{s: s}, opts...))
	reflector := grpcreflect.NewStaticReflector(GRPCServices...)
	mount(grpcreflect.NewHandlerV1(reflector))
	mount(grpcreflect.NewHandlerV1Alpha(reflector))
}

// guardBrowser refuses, with authentication disabled, the calls a browser
// may send from another site without the user's intent, as REST does
// (checkBrowser): the server acts for anyone then. With authentication a
// call needs its bearer credential, which a browser never adds by itself.
func (s *Server) guardBrowser(h http.Handler) http.Handler {
	if !s.opts.DisableAuth {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if aerr := checkBrowser(r, ""); aerr != nil {
			http.Error(w, aerr.Message, http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// streamDeadlines lifts the HTTP server's read and write deadlines from
// a streaming call (a procedure marked stream, server reflection): a stream
// lasts as long as its client holds it, as the event stream does, each of
// its writes bounded (streamWrites) until the server closes its streams.
// Unary calls keep them, and RequestTimeout bounds their work.
func (s *Server) streamDeadlines(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := s.procs[r.URL.Path]; (ok && p.stream) || strings.HasPrefix(r.URL.Path, "/grpc.reflection.") {
			_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
			var release func()
			w, release = streamWrites(w, s.closing)
			defer release()
		}
		h.ServeHTTP(w, r)
	})
}

// grpcAccess is the gRPC API's wrap: authentication, permission, scope,
// deadline, metrics and the mapping of errors to gRPC codes.
type grpcAccess struct{ s *Server }

// authorize authenticates a call, checks its procedure's permission and
// puts the principal and its scope in ctx. It checks the scope at the
// target of a unary call's message (msg; nil for a stream).
func (g *grpcAccess) authorize(ctx context.Context, procName string, hdr http.Header, msg any) (context.Context, procedure, *scopeCheck, error) {
	s := g.s
	p, ok := s.procs[procName]
	if !ok {
		s.log.Error("procedure missing from the procedure table", "procedure", procName)
		return ctx, p, nil, connect.NewError(connect.CodeInternal, errors.New("internal error"))
	}
	pr, aerr := s.callPrincipal(ctx, hdr)
	if aerr != nil {
		if aerr.cause != nil {
			s.log.Info("credential refused", "procedure", procName, "reason", aerr.cause.Error())
		}
		return ctx, p, nil, s.grpcError(aerr)
	}
	if !Allowed(pr.Permissions, p.perm) {
		return ctx, p, nil, s.grpcError(errorf(http.StatusForbidden, CodeForbidden, "permission %s is required", p.perm))
	}
	ctx = context.WithValue(ctx, principalKey{}, pr)
	ctx, c := withScopeCheck(ctx, pr.Scope(p.perm))
	var t target
	if p.target != nil && msg != nil {
		t = p.target(msg)
	}
	if err := s.checkTarget(ctx, p.perm, p.scope, c.scope, t); err != nil {
		if errors.Is(err, errNoScope) {
			s.log.Error("procedure declares no scope", "procedure", procName)
			err = errorf(http.StatusInternalServerError, CodeInternal, "internal error")
		}
		return ctx, p, c, s.grpcError(err)
	}
	return ctx, p, c, nil
}

// callPrincipal authenticates a gRPC call by its authorization metadata.
// Sessions are the dashboard's, never a gRPC client's.
func (s *Server) callPrincipal(ctx context.Context, hdr http.Header) (Principal, *apiError) {
	if s.opts.DisableAuth {
		return Principal{Name: "anonymous", ID: "anonymous", Kind: "anonymous", Permissions: []string{PermAdmin}}, nil
	}
	return s.auth.bearer(ctx, hdr.Get("Authorization"))
}

func (g *grpcAccess) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if req.Spec().IsClient {
			return next(ctx, req)
		}
		start := time.Now()
		name := req.Spec().Procedure
		ctx, p, c, err := g.authorize(ctx, name, req.Header(), req.Any())
		var res connect.AnyResponse
		if err == nil {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, g.s.opts.RequestTimeout)
			res, err = next(ctx, req)
			cancel()
			if err == nil && p.scope == byHandler && !c.read.Load() {
				g.s.log.Error("procedure answered without reading its scope", "procedure", name)
				res, err = nil, errorf(http.StatusInternalServerError, CodeInternal, "internal error")
			}
			err = g.s.grpcError(err)
		}
		g.s.metrics.request("gRPC "+name, grpcStatus(err), time.Since(start), true)
		return res, err
	}
}

func (g *grpcAccess) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (g *grpcAccess) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		name := conn.Spec().Procedure
		ctx, p, c, err := g.authorize(ctx, name, conn.RequestHeader(), nil)
		if err == nil && p.target != nil {
			// A stream's message comes after this check: a stream must
			// not need one to be scoped.
			g.s.log.Error("streaming procedure declares a scope it cannot check", "procedure", name)
			err = g.s.grpcError(errorf(http.StatusInternalServerError, CodeInternal, "internal error"))
		}
		if err != nil {
			g.s.metrics.request("gRPC "+name, grpcStatus(err), 0, false)
			return err
		}
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		hdr := conn.RequestHeader()
		go g.s.watchCredential(ctx, cancel, name, func() *apiError { _, aerr := g.s.callPrincipal(ctx, hdr); return aerr })
		err = next(ctx, conn)
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = cause
		}
		if p.scope == byHandler && !c.read.Load() && err == nil {
			g.s.log.Error("procedure answered without reading its scope", "procedure", name)
		}
		err = g.s.grpcError(err)
		g.s.metrics.request("gRPC "+name, grpcStatus(err), 0, false)
		return err
	}
}

// watchCredential ends a stream (cancel) once its credential is no longer
// accepted (authenticate, every CredentialRecheck, answers 401: a revoked
// key, an ended session, an expired token) or the server closes its
// streams. The cause says which. Every stream, REST's and gRPC's, is
// watched by it.
func (s *Server) watchCredential(ctx context.Context, cancel context.CancelCauseFunc, name string, authenticate func() *apiError) {
	t := time.NewTicker(s.opts.CredentialRecheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.closing:
			cancel(errorf(http.StatusServiceUnavailable, CodeUnavailable, "the server is shutting down: reconnect"))
			return
		case <-t.C:
			if aerr := authenticate(); aerr != nil && aerr.Status == http.StatusUnauthorized {
				s.log.Info("stream ended: its credential is no longer accepted", "stream", name, "error", aerr.Message)
				cancel(aerr)
				return
			}
		}
	}
}

// grpcError maps an error of the engine, the store or a validation to a
// gRPC status with REST's message, and REST's code and field in an
// ErrorDetail.
func (s *Server) grpcError(err error) error {
	if err == nil {
		return nil
	}
	if ce, ok := errors.AsType[*connect.Error](err); ok {
		return ce
	}
	if errors.Is(err, context.Canceled) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	ae := toAPIError(err)
	code := connect.CodeInternal
	switch ae.Status {
	case http.StatusBadRequest:
		code = connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		code = connect.CodeUnauthenticated
	case http.StatusForbidden:
		code = connect.CodePermissionDenied
	case http.StatusNotFound:
		code = connect.CodeNotFound
	case http.StatusConflict:
		code = connect.CodeFailedPrecondition
		if ae.Code == CodeStaleLease {
			code = connect.CodeAborted
		}
	case http.StatusRequestEntityTooLarge:
		code = connect.CodeResourceExhausted
	case http.StatusServiceUnavailable:
		switch ae.Code {
		case CodeOverloaded:
			code = connect.CodeResourceExhausted
		case CodeTimeout:
			code = connect.CodeDeadlineExceeded
		default:
			code = connect.CodeUnavailable
		}
	}
	switch {
	case code == connect.CodeInternal:
		s.log.Error("procedure failed", "error", err)
	case ae.Code == CodeUnavailable:
		s.logUnavailable(err)
	}
	ce := connect.NewError(code, errors.New(ae.Message))
	if d, derr := connect.NewErrorDetail(&weftv1.ErrorDetail{Code: ae.Code, Field: ae.Field}); derr == nil {
		ce.AddDetail(d)
	}
	if ae.Status == http.StatusServiceUnavailable {
		ce.Meta().Set("Retry-After", strconv.Itoa(int(max(s.opts.RetryAfter.Round(time.Second), time.Second)/time.Second)))
	}
	return ce
}

// grpcStatus is the HTTP status a gRPC outcome is counted under in the
// request metrics, beside the REST routes'.
func grpcStatus(err error) int {
	if err == nil {
		return http.StatusOK
	}
	code := connect.CodeOf(err)
	if code == connect.CodeCanceled {
		return statusClientGone
	}
	if s, ok := weftv1.HTTPStatus(code); ok {
		return s
	}
	return http.StatusInternalServerError
}
