// Package server is weft's HTTP API: the REST endpoints under /v1 for
// workflows, tasks and steps, the remote-worker protocol, health checks,
// Prometheus metrics and the OpenAPI document, with API-key and JWT
// authentication; and beside them, on the same handler, the gRPC API
// (grpc.go: gRPC, gRPC-Web and Connect, with reflection) for tasks and
// remote workers, under the same authentication and scopes.
//
// It serves an engine that the caller opens, configures (with its own Go
// handlers, if any) and starts:
//
//	e, _ := weft.Open(ctx, "postgres://…", weft.Config{})
//	e.Handle("shop.charge", charge)
//	e.Start(ctx)
//	srv, _ := server.New(e, server.Options{})
//	defer srv.Close()
//	http.ListenAndServe(":8080", srv)
//
// (gRPC clients without TLS need HTTP/2 cleartext: set the http.Server's
// Protocols to include UnencryptedHTTP2, as weft serve does.)
//
// `weft serve` is this with the built-in handlers.
package server

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// Options configures a Server. The zero value serves with API keys only.
type Options struct {
	// Logger receives request and error logs. Default: slog.Default().
	// Credentials never reach it.
	Logger *slog.Logger
	// MetricsElsewhere leaves /metrics out of the API: the program serves
	// MetricsHandler on a listener of its own (weft serve --metrics-addr),
	// so that the public port does not show every namespace's counts.
	MetricsElsewhere bool
	// DisableAuth serves every request without credentials, with every
	// permission. Only for local development: New logs a warning.
	DisableAuth bool
	// JWT, if set, accepts RS256 bearer tokens besides API keys.
	JWT *JWTConfig
	// MaxBodyBytes limits request bodies. Default 1 MiB.
	MaxBodyBytes int64
	// MaxBacklog, if positive, refuses new tasks with 503 while this many
	// tasks are pending or running.
	MaxBacklog int
	// RetryAfter is the Retry-After of a 503. Default 5s.
	RetryAfter time.Duration
	// RequestTimeout bounds a request's work (long polls excepted, which
	// MaxPoll bounds). Default 30s.
	RequestTimeout time.Duration
	// MaxPoll bounds how long a remote worker's claim waits for work.
	// Default 30s.
	MaxPoll time.Duration
	// PollFallback is how often a waiting claim looks for work even if not
	// woken (work readied by another process on SQLite). Default 1s.
	PollFallback time.Duration
	// BulkBatchSize is how many tasks each transaction of a bulk action
	// (cancel, retry, delete, prune) takes. Default 500.
	BulkBatchSize int
	// BulkMaxBatches, if positive, makes a bulk action answer after that
	// many batches ("complete": false, with what remains and a cursor),
	// as it does anyway once half its request's time has passed.
	BulkMaxBatches int
	// UI, if set, makes the handler that serves every path outside the API
	// (the dashboard, package dashboard); nil answers them 404.
	UI func(*Server) http.Handler
	// TrustedProxies lists the addresses of the reverse proxies whose
	// X-Forwarded-Proto header is believed: a request from one of them
	// with X-Forwarded-Proto: https arrived over TLS, so the session
	// cookie it gets is Secure. Requests from anywhere else are judged by
	// their own connection.
	TrustedProxies []netip.Prefix
	// CredentialRecheck is how often an open event stream checks its
	// credential again, so that revoking a key, signing out or a token's
	// expiry ends the streams it opened. Default 2s.
	CredentialRecheck time.Duration
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.RetryAfter, 5*time.Second)
	def(&o.RequestTimeout, 30*time.Second)
	def(&o.MaxPoll, 30*time.Second)
	def(&o.PollFallback, time.Second)
	def(&o.CredentialRecheck, 2*time.Second)
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
}

// Server is the HTTP API of one engine. It is an http.Handler.
type Server struct {
	engine  *weft.Engine
	workers *weft.Workers
	opts    Options
	log     *slog.Logger
	auth    *authenticator
	metrics *metrics
	mux     *http.ServeMux
	routes  []route
	// procs are the gRPC procedures by name (grpc.go).
	procs map[string]procedure
	// admit serialises the backlog check with the submission it admits
	// (MaxBacklog only).
	admit chan struct{}

	unsubscribe func()
	// closing is closed by CloseStreams: event streams end.
	closing   chan struct{}
	closeOnce sync.Once
	// unavailable logs an outage every unavailableLogEvery, not once per
	// request.
	unavailable outageLog
}

// unavailableLogEvery is how often a database outage is logged while
// requests keep failing on it.
const unavailableLogEvery = 10 * time.Second

func (s *Server) logUnavailable(err error) { s.unavailable.warn(s.log, err) }

// outageLog logs a database outage at most every unavailableLogEvery.
type outageLog struct {
	at atomic.Int64 // when it last logged, unix nanoseconds
}

func (o *outageLog) warn(log *slog.Logger, err error) {
	now, last := time.Now().UnixNano(), o.at.Load()
	if now-last < int64(unavailableLogEvery) || !o.at.CompareAndSwap(last, now) {
		return
	}
	log.Warn("database unavailable: answering 503 with Retry-After", "error", err)
}

// New returns the API of an engine. Call Close when done with it.
func New(e *weft.Engine, opts Options) (*Server, error) {
	if e == nil {
		return nil, errors.New("server: nil engine")
	}
	opts.setDefaults()
	s := &Server{engine: e, workers: e.Workers(), opts: opts, log: opts.Logger, auth: &authenticator{store: e.APIKeys()}, mux: http.NewServeMux(),
		admit: make(chan struct{}, 1), closing: make(chan struct{})}
	if opts.JWT != nil {
		v, err := newJWTVerifier(*opts.JWT)
		if err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
		s.auth.jwt = v
	}
	if opts.DisableAuth {
		s.log.Warn("authentication is DISABLED: every request has every permission; never expose this server")
	}
	s.metrics = newMetrics(e, s.log)
	s.unsubscribe = s.metrics.close
	s.routes = s.routeTable()
	// paths finds the route of a request whatever its method, so that a
	// known path asked with another method is answered 405 with Allow.
	paths, allow := http.NewServeMux(), map[string][]string{}
	for _, rt := range s.routes {
		s.mux.Handle(rt.method+" "+rt.path, s.wrap(rt))
		if allow[rt.path] == nil {
			paths.Handle(rt.path, http.NotFoundHandler())
		}
		allow[rt.path] = append(allow[rt.path], rt.method)
	}
	s.mountGRPC()
	notFound := s.wrap(route{path: "/", public: true, h: func(r *http.Request) (int, any, error) {
		if _, pattern := paths.Handler(r); pattern != "" {
			return 0, nil, &apiError{Status: http.StatusMethodNotAllowed, Code: CodeMethodNotAllowed,
				Message: fmt.Sprintf("%s %s: the route takes %s", r.Method, r.URL.Path, strings.Join(allow[pattern], ", ")),
				header:  http.Header{"Allow": {strings.Join(allow[pattern], ", ")}}}
		}
		return 0, nil, fmt.Errorf("route %s %s: %w", r.Method, r.URL.Path, store.ErrNotFound)
	}})
	if opts.UI != nil {
		s.mux.Handle("/v1/", notFound)
		s.mux.Handle("/", opts.UI(s))
	} else {
		s.mux.Handle("/", notFound)
	}
	return s, nil
}

// Close ends the server's subscription to its engine.
func (s *Server) Close() error {
	s.CloseStreams()
	s.unsubscribe()
	return nil
}

// ServeHTTP serves the API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// route is one endpoint. Routes are data so that the OpenAPI document can be
// checked against them.
type route struct {
	method string
	path   string // ServeMux pattern path; {name} segments as in OpenAPI
	perm   string // permission needed; "" with public
	public bool
	// scope says where the route's namespace is known, so that the
	// credential's scope of perm is checked there (access.go).
	scope scopeBy
	// poll marks a long poll: its own deadline instead of RequestTimeout.
	poll bool
	// stream marks a route that answers until the client leaves (the
	// event stream).
	stream bool
	// query lists the query parameters the route takes; any other is
	// refused (400 unknown_field) before the handler runs.
	query []string
	// raw handlers write their own response.
	raw http.HandlerFunc
	h   func(r *http.Request) (status int, body any, err error)
}

// Route describes one endpoint of the API, for documentation and tests.
type Route struct {
	Method, Path, Permission string
	// Query lists the query parameters the route takes.
	Query []string
	// Scope says where the namespace a credential's scope is checked
	// against comes from: "path", "task", "step", "webhook", "worker",
	// "handler" (the body or the filter) or "everywhere" (the permission
	// must hold in every namespace); "" for a public route.
	Scope string
}

// MetricsHandler serves the server's Prometheus metrics (the engine's and
// the API's), for a program that serves them on a listener of its own
// (Options.MetricsElsewhere).
func (s *Server) MetricsHandler() http.Handler { return s.metrics.handler() }

// Routes lists the API's endpoints.
func (s *Server) Routes() []Route {
	out := make([]Route, len(s.routes))
	for i, r := range s.routes {
		out[i] = Route{Method: r.method, Path: r.path, Permission: r.perm, Query: r.query, Scope: r.scope.String()}
	}
	return out
}

func (s *Server) routeTable() []route {
	routes := []route{
		{method: "GET", path: "/health/live", public: true, h: s.live},
		{method: "GET", path: "/health/ready", public: true, h: s.readyCheck},
		{method: "GET", path: "/v1/openapi.json", public: true, raw: serveOpenAPI},

		{method: "POST", path: "/v1/workflows", perm: PermWorkflowsWrite, scope: byHandler, h: s.registerWorkflow},
		{method: "GET", path: "/v1/workflows", perm: PermWorkflowsRead, scope: byHandler, h: s.listWorkflows},
		{method: "POST", path: "/v1/workflows/validate", perm: PermWorkflowsRead, scope: byHandler, h: s.validateWorkflow},
		{method: "GET", path: "/v1/workflows/{namespace}/{name}/versions/{version}", perm: PermWorkflowsRead, scope: byPath, h: s.getWorkflow},
		{method: "GET", path: "/v1/schedules", perm: PermWorkflowsRead, scope: byHandler, query: []string{"namespace", "workflow", "name"}, h: s.listSchedules},
		{method: "GET", path: "/v1/schedules/{namespace}/{workflow}/{name}", perm: PermWorkflowsRead, scope: byPath, h: s.getSchedule},
		{method: "POST", path: "/v1/schedules/{namespace}/{workflow}/{name}/pause", perm: PermWorkflowsWrite, scope: byPath, h: s.pauseSchedule},
		{method: "POST", path: "/v1/schedules/{namespace}/{workflow}/{name}/resume", perm: PermWorkflowsWrite, scope: byPath, h: s.resumeSchedule},

		{method: "POST", path: "/v1/tasks", perm: PermTasksCreate, scope: byHandler, h: s.createTask},
		{method: "POST", path: "/v1/tasks/batch", perm: PermTasksCreate, scope: byHandler, h: s.submitBatch},
		{method: "GET", path: "/v1/tasks", perm: PermTasksRead, scope: byHandler, query: []string{"namespace", "workflow", "state", "created_after", "created_before",
			"limit", "cursor", "tag", "attention", "active", "key", "schedule"}, h: s.listTasks},
		{method: "GET", path: "/v1/tasks/{id}", perm: PermTasksRead, scope: byTask, h: s.getTask},
		{method: "POST", path: "/v1/tasks/{id}/cancel", perm: PermTasksCancel, scope: byTask, h: s.cancelTask},
		{method: "POST", path: "/v1/tasks/{id}/retry", perm: PermTasksRetry, scope: byTask, h: s.retryTask},
		{method: "GET", path: "/v1/tasks/{id}/audit", perm: PermTasksRead, scope: byTask, h: s.taskAudit},
		{method: "POST", path: "/v1/tasks/{id}/signals/{name}", perm: PermTasksSignal, scope: byTask, h: s.signalTask},
		{method: "GET", path: "/v1/events", perm: PermTasksRead, scope: byHandler, stream: true, query: []string{"namespace", "workflow", "task", "after"}, raw: s.streamEvents},
		{method: "POST", path: "/v1/webhooks", perm: PermWebhooksWrite, scope: byHandler, h: s.createWebhook},
		{method: "GET", path: "/v1/webhooks", perm: PermWebhooksRead, scope: byHandler, h: s.listWebhooks},
		{method: "DELETE", path: "/v1/webhooks/{id}", perm: PermWebhooksWrite, scope: byWebhook, h: s.deleteWebhook},
		{method: "POST", path: "/v1/webhooks/{id}/enable", perm: PermWebhooksWrite, scope: byWebhook, h: s.enableWebhook},
		{method: "POST", path: "/v1/tasks/cancel", perm: PermTasksCancel, scope: byHandler, h: s.bulkCancel},
		{method: "POST", path: "/v1/tasks/retry", perm: PermTasksRetry, scope: byHandler, h: s.bulkRetry},
		{method: "POST", path: "/v1/tasks/delete", perm: PermTasksDelete, scope: byHandler, h: s.bulkDelete},
		{method: "POST", path: "/v1/tasks/prune", perm: PermTasksDelete, scope: byHandler, h: s.prune},
		{method: "GET", path: "/v1/retention", perm: PermTasksRead, scope: byHandler, h: s.listRetention},
		{method: "PUT", path: "/v1/retention/{namespace}", perm: PermTasksDelete, scope: byPath, h: s.setRetention},
		{method: "GET", path: "/v1/workers", perm: PermWorkersRead, scope: byHandler, h: s.listWorkers},
		{method: "GET", path: "/v1/oplog", perm: PermTasksRead, scope: everywhere, query: []string{"limit"}, h: s.operatorLog},

		{method: "GET", path: "/v1/steps/{id}", perm: PermStepsRead, scope: byStep, h: s.getStep},
		{method: "POST", path: "/v1/steps/{id}/retry", perm: PermStepsResolve, scope: byStep, h: s.retryStep},
		{method: "POST", path: "/v1/steps/{id}/resolve", perm: PermStepsResolve, scope: byStep, h: s.resolveStep},
		{method: "POST", path: "/v1/steps/{id}/complete", perm: PermStepsResolve, scope: byStep, h: s.completeStep},

		{method: "POST", path: "/v1/workers", perm: PermWorkersConnect, scope: byHandler, h: s.registerWorker},
		{method: "DELETE", path: "/v1/workers/{id}", perm: PermWorkersConnect, scope: byWorker, h: s.deregisterWorker},
		{method: "POST", path: "/v1/workers/{id}/claim", perm: PermWorkersConnect, scope: byHandler, poll: true, h: s.claim},
		{method: "POST", path: "/v1/workers/{id}/heartbeat", perm: PermWorkersConnect, scope: byWorker, h: s.heartbeat},
		{method: "POST", path: "/v1/workers/{id}/complete", perm: PermWorkersConnect, scope: byWorker, h: s.workerComplete},
		{method: "POST", path: "/v1/workers/{id}/fail", perm: PermWorkersConnect, scope: byWorker, h: s.workerFail},
		{method: "POST", path: "/v1/workers/{id}/calls", perm: PermWorkersConnect, scope: byWorker, h: s.workerCalls},
		{method: "POST", path: "/v1/workers/{id}/checkpoint", perm: PermWorkersConnect, scope: byWorker, h: s.workerCheckpoint},
		{method: "POST", path: "/v1/workers/{id}/progress", perm: PermWorkersConnect, scope: byWorker, h: s.workerProgress},

		{method: "GET", path: "/v1/policies", perm: PermPoliciesRead, scope: byHandler, h: s.listPolicies},
		{method: "POST", path: "/v1/policies", perm: PermPoliciesWrite, scope: byHandler, h: s.changePolicy},
		{method: "GET", path: "/v1/policies/changes", perm: PermPoliciesRead, scope: byHandler, query: []string{"limit"}, h: s.policyChanges},
		{method: "POST", path: "/v1/breakers/reset", perm: PermPoliciesWrite, scope: byHandler, h: s.resetBreaker},
	}
	if !s.opts.MetricsElsewhere {
		routes = append(routes, route{method: "GET", path: "/metrics", public: true, raw: s.metrics.handler().ServeHTTP})
	}
	return routes
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// wrap adds to a route what every request gets: a body limit, a deadline,
// authentication and authorization, panic recovery, JSON errors, metrics
// and a log line.
func (s *Server) wrap(rt route) http.Handler {
	name := rt.method + " " + rt.path
	if rt.method == "" {
		name = "unmatched"
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		var who string
		defer func() {
			if p := recover(); p != nil {
				s.log.Error("handler panicked", "route", name, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				if sw.status == 0 {
					writeError(sw, errorf(http.StatusInternalServerError, CodeInternal, "internal error"))
				}
			}
			d := time.Since(start)
			// A long poll or a stream lasts as long as it waits: counted,
			// not timed.
			s.metrics.request(name, sw.status, d, !rt.poll && !rt.stream)
			s.log.Debug("request", "method", r.Method, "path", r.URL.Path, "route", name, "status", sw.status,
				"duration_ms", d.Milliseconds(), "principal", who)
		}()
		// A body announced larger than the limit is refused on every
		// route, whether or not the route reads it; one sent without a
		// length is cut at the limit by the reader below.
		if r.ContentLength > s.opts.MaxBodyBytes {
			s.metrics.rejected.WithLabelValues("body_too_large").Inc()
			writeError(sw, errorf(http.StatusRequestEntityTooLarge, CodeBodyTooLarge, "the body is larger than %d bytes", s.opts.MaxBodyBytes))
			return
		}
		r.Body = http.MaxBytesReader(sw, r.Body, s.opts.MaxBodyBytes)
		if !rt.public {
			p, aerr := s.principal(r)
			if aerr != nil && aerr.Status >= 500 && s.clientGone(sw, r, name, aerr) {
				return
			}
			if aerr != nil {
				if aerr.Status == http.StatusUnauthorized {
					sw.Header().Set("WWW-Authenticate", `Bearer realm="weft"`)
					if aerr.cause != nil {
						s.log.Info("credential refused", "route", name, "reason", aerr.cause.Error())
					}
				}
				writeError(sw, aerr)
				return
			}
			who = p.Kind + ":" + p.Name
			if !Allowed(p.Permissions, rt.perm) {
				writeError(sw, errorf(http.StatusForbidden, CodeForbidden, "permission %s is required", rt.perm))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), principalKey{}, p))
		}
		var scope *scopeCheck
		// The URL is checked here for every route, before any handler
		// reads it: parameters the route does not take, and text no store
		// can hold.
		if rt.method != "" {
			if aerr := checkURL(r, rt.path, rt.query, false); aerr != nil {
				writeError(sw, aerr)
				return
			}
		}
		if !rt.public {
			p, _ := PrincipalFrom(r.Context())
			var err error
			if r, scope, err = s.withScope(r, rt, p); err != nil {
				writeError(sw, toAPIError(err))
				return
			}
		}
		if rt.raw != nil {
			rt.raw(sw, r)
			if rt.scope == byHandler && !scope.read.Load() {
				s.log.Error("route answered without reading its scope", "route", name)
			}
			return
		}
		timeout := s.opts.RequestTimeout
		if rt.poll {
			timeout = s.opts.MaxPoll + s.opts.RequestTimeout
		}
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		status, body, err := rt.h(r.WithContext(ctx))
		if err == nil && scope != nil && rt.scope == byHandler && !scope.read.Load() {
			// A route that says its handler bounds what it does by the
			// scope, and did not read it: its answer may reach outside.
			s.log.Error("route answered without reading its scope", "route", name)
			err = errorf(http.StatusInternalServerError, CodeInternal, "internal error")
		}
		if err != nil && s.clientGone(sw, r, name, err) {
			return
		}
		if err != nil {
			ae := toAPIError(err)
			switch {
			case ae.Status >= 500 && ae.Code == CodeInternal:
				s.log.Error("request failed", "route", name, "error", err)
			case ae.Code == CodeBodyTooLarge:
				s.metrics.rejected.WithLabelValues("body_too_large").Inc()
			case ae.Code == CodeUnavailable:
				s.metrics.rejected.WithLabelValues("unavailable").Inc()
				s.logUnavailable(err)
			}
			// Every 503 (overloaded, unavailable, timeout) is worth
			// retrying: say when.
			if ae.Status == http.StatusServiceUnavailable {
				sw.Header().Set("Retry-After", strconv.Itoa(int(max(s.opts.RetryAfter.Round(time.Second), time.Second)/time.Second)))
			}
			writeError(sw, ae)
			return
		}
		if status == http.StatusNoContent {
			sw.WriteHeader(status)
			return
		}
		writeJSON(sw, status, body)
	})
}

// statusClientGone is the status recorded (in metrics and the request log,
// never sent) for a request whose client went away before its answer.
const statusClientGone = 499

// clientGone reports whether the request failed because its client went
// away (the connection closed, a long poll or stream abandoned): that is
// no error of the server's, and nobody reads an answer, so none is
// written and it is logged at debug only.
func (s *Server) clientGone(sw *statusWriter, r *http.Request, route string, err error) bool {
	if r.Context().Err() == nil || sw.status != 0 {
		return false
	}
	sw.status = statusClientGone
	s.log.Debug("client went away", "route", route, "error", err)
	return true
}

func (s *Server) principal(r *http.Request) (Principal, *apiError) {
	if s.opts.DisableAuth {
		if aerr := checkBrowser(r, ""); aerr != nil {
			return Principal{}, aerr
		}
		return Principal{Name: "anonymous", ID: "anonymous", Kind: "anonymous", Permissions: []string{PermAdmin}}, nil
	}
	if token, ok := sessionToken(r); ok {
		if aerr := checkBrowser(r, token); aerr != nil {
			return Principal{}, aerr
		}
		return s.auth.session(r.Context(), token)
	}
	return s.auth.authenticate(r)
}

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI document, as GET /v1/openapi.json
// serves it.
func OpenAPI() []byte { return slices.Clone(openAPIDoc) }

func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPIDoc)
}

func (s *Server) live(*http.Request) (int, any, error) {
	return http.StatusOK, alive(), nil
}

func (s *Server) readyCheck(r *http.Request) (int, any, error) {
	status, body := readiness(r.Context(), s.engine, s.logUnavailable)
	return status, body, nil
}

// alive is the answer of /health/live: the process serves requests.
func alive() wire.Readiness { return wire.Readiness{Status: "ok", Checks: map[string]string{}} }

// Health serves an engine's /health/live and /health/ready as weft serve
// answers them, for a process that runs an engine without the API (weft
// worker --metrics-addr).
func Health(e *weft.Engine, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health/live", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, alive())
	})
	var outage outageLog
	mux.HandleFunc("GET /health/ready", func(w http.ResponseWriter, r *http.Request) {
		status, body := readiness(r.Context(), e, func(err error) { outage.warn(log, err) })
		writeJSON(w, status, body)
	})
	return mux
}

// readiness is an engine's answer to /health/ready, as weft serve and weft
// worker --metrics-addr give it: 200 when its database answers, it runs
// and its loops work, else 503 naming each failing check (database,
// engine, a failing loop, database_file). A database that does not answer
// is told to unreachable, which logs it at most every unavailableLogEvery.
func readiness(ctx context.Context, e *weft.Engine, unreachable func(error)) (int, wire.Readiness) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	checks := map[string]string{"database": "ok", "engine": "ok"}
	ok := true
	if _, err := e.Backlog(ctx, 1); err != nil {
		checks["database"], ok = "unreachable", false
		unreachable(err)
	}
	if !e.Running() {
		checks["engine"], ok = "not running", false
	}
	// The engine's own loops: a store that fails them (a full disk, a
	// deleted file) is named here even when a read still works.
	for name, problem := range e.Health().Failing {
		checks[name], ok = problem, false
	}
	if !ok {
		return http.StatusServiceUnavailable, wire.Readiness{Status: "unavailable", Checks: checks}
	}
	return http.StatusOK, wire.Readiness{Status: "ok", Checks: checks}
}

// pathID reads a positive integer path parameter.
func pathID(r *http.Request, name string) (int64, error) {
	v := r.PathValue(name)
	id, err := strconv.ParseInt(v, 10, 64)
	if err != nil || id < 1 {
		return 0, fieldError(name, "must be a positive integer, got %q", v)
	}
	return id, nil
}

// rawJSON is a JSON value of a request body, kept as is.
func rawJSON(v json.RawMessage) json.RawMessage {
	if len(v) == 0 {
		return nil
	}
	return v
}
