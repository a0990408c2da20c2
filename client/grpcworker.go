package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"connectrpc.com/connect"
	"go.opentelemetry.io/otel/propagation"

	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/wire/weftv1/weftv1connect"
)

// WorkerConfig configures a GRPCWorker.
type WorkerConfig struct {
	// URL is the server's ("http://HOST:PORT" for HTTP/2 without TLS,
	// "https://HOST" with it) and Token its credential, which needs
	// workers:connect.
	URL, Token string
	// Name names the worker in the server's list. Default "go-worker".
	Name string
	// Namespaces limits the steps the worker takes; none: every
	// namespace the credential may act in.
	Namespaces []string
	// Slots is how many steps run at once. Default 4.
	Slots int
	// Drain bounds how long Run waits, once its context ends, for running
	// steps before it cancels their contexts. Default 30s.
	Drain time.Duration
	// MinBackoff and MaxBackoff bound the wait before connecting again
	// after a failure (doubling, with jitter). Defaults 100ms and 10s.
	MinBackoff, MaxBackoff time.Duration
	// Logger receives the worker's logs. Default slog.Default().
	Logger *slog.Logger
}

// GRPCWorker runs handlers for the steps a weft server pushes it over
// gRPC (weft.v1.WorkerService): it registers, holds a Pull stream that is
// pushed a step as soon as one is ready and a slot is free, heartbeats
// the steps it runs, reports each outcome, and reconnects with backoff
// when the stream or the server goes away.
type GRPCWorker struct {
	cfg      WorkerConfig
	api      weftv1connect.WorkerServiceClient
	handlers map[string]StepHandler
	log      *slog.Logger

	regMu   sync.Mutex // one registration again at a time (rejoin)
	mu      sync.Mutex
	id      string
	every   time.Duration          // the heartbeat interval the server asked for
	held    map[fenceKey]*heldStep // by fence
	stream  *connect.BidiStreamForClient[weftv1.PullRequest, weftv1.PullResponse]
	freed   chan struct{} // a slot freed
	running sync.WaitGroup
}

// fenceKey identifies one attempt's hold on a step. Two attempts of a
// step may run here at once: one the server took back (timed out, or the
// worker declared dead) whose handler has not returned, and the next.
type fenceKey struct {
	step    int64
	attempt int32
	lease   int64
}

func keyOf(f *weftv1.Fence) fenceKey { return fenceKey{f.GetStepId(), f.GetAttempt(), f.GetLeaseId()} }

type heldStep struct {
	fence  *weftv1.Fence
	worker string // the registration the step was pushed to
	cancel context.CancelCauseFunc
}

// NewGRPCWorker returns a worker of cfg; register its handlers with
// Handle, then call Run.
func NewGRPCWorker(cfg WorkerConfig) (*GRPCWorker, error) {
	hc, base, err := grpcHTTP(cfg.URL)
	if err != nil {
		return nil, err
	}
	if cfg.Name == "" {
		cfg.Name = "go-worker"
	}
	if cfg.Slots <= 0 {
		cfg.Slots = 4
	}
	if cfg.Slots > 100 {
		return nil, fmt.Errorf("slots: at most 100, got %d", cfg.Slots)
	}
	if cfg.Drain <= 0 {
		cfg.Drain = 30 * time.Second
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = 100 * time.Millisecond
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		cfg.MaxBackoff = max(10*time.Second, cfg.MinBackoff)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &GRPCWorker{cfg: cfg, api: weftv1connect.NewWorkerServiceClient(hc, base, connect.WithGRPC()), handlers: map[string]StepHandler{},
		log: cfg.Logger, held: map[fenceKey]*heldStep{}, freed: make(chan struct{}, 1)}, nil
}

// Handle registers the handler of the steps whose handler is name. Call
// it before Run.
func (w *GRPCWorker) Handle(name string, h StepHandler) { w.handlers[name] = h }

// fatal reports whether a refusal will not change by trying again.
func fatal(err error) bool {
	if ae, ok := errors.AsType[*Error](err); ok {
		return ae.Status == http.StatusBadRequest || ae.Status == http.StatusUnauthorized || ae.Status == http.StatusForbidden
	}
	switch connect.CodeOf(err) {
	case connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeInvalidArgument:
		return true
	}
	return false
}

// forgotten reports whether err says the server no longer knows the
// worker (unknown, or declared dead: worker_lost): it must register again.
func forgotten(err error) bool {
	if ae, ok := errors.AsType[*Error](grpcError(err)); ok {
		return ae.Status == http.StatusNotFound || ae.Code == wire.CodeWorkerLost
	}
	return false
}

// Run works until ctx ends, then lets running steps finish (for up to
// Drain) and deregisters. It returns nil then, or the error that will not
// pass by retrying (a credential refused, a configuration the server
// refuses).
func (w *GRPCWorker) Run(ctx context.Context) error {
	if len(w.handlers) == 0 {
		return errors.New("no handlers: call Handle before Run")
	}
	// Steps run, heartbeat and report beyond ctx, until they drain.
	work, stopWork := context.WithCancel(context.WithoutCancel(ctx))
	defer stopWork()
	hbCtx, stopHeartbeats := context.WithCancel(context.WithoutCancel(ctx))
	hbDone := make(chan struct{})
	var err error
	for backoff := w.cfg.MinBackoff; ctx.Err() == nil; {
		if err = w.register(ctx); err == nil {
			break
		}
		if fatal(err) {
			stopHeartbeats()
			return err
		}
		w.log.Warn("grpc worker: register failed; trying again", "error", err, "in", backoff)
		backoff = w.sleep(ctx, backoff)
	}
	go func() { defer close(hbDone); w.heartbeats(hbCtx, ctx) }()
	err = w.pull(ctx, work)
	// Drain: the steps running finish, or are cancelled at the deadline.
	drained := make(chan struct{})
	go func() { w.running.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(w.cfg.Drain):
		stopWork()
		<-drained
	}
	stopHeartbeats()
	<-hbDone
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, derr := w.api.Deregister(dctx, request(dctx, &weftv1.DeregisterRequest{WorkerId: w.workerID()}, w.cfg.Token)); derr != nil {
		w.log.Debug("grpc worker: deregister", "error", derr)
	}
	return err
}

func (w *GRPCWorker) workerID() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

func (w *GRPCWorker) handlerNames() []string {
	names := make([]string, 0, len(w.handlers))
	for n := range w.handlers {
		names = append(names, n)
	}
	return names
}

func (w *GRPCWorker) register(ctx context.Context) error {
	res, err := w.api.Register(ctx, request(ctx, &weftv1.RegisterRequest{Name: w.cfg.Name, Namespaces: w.cfg.Namespaces,
		Handlers: w.handlerNames()}, w.cfg.Token))
	if err != nil {
		return grpcError(err)
	}
	w.mu.Lock()
	w.id = res.Msg.GetWorkerId()
	w.every = time.Duration(res.Msg.GetHeartbeatIntervalMs()) * time.Millisecond
	w.mu.Unlock()
	w.log.Info("grpc worker registered", "worker_id", res.Msg.GetWorkerId(), "handlers", len(w.handlers))
	return nil
}

// rejoin follows the server's word that registration dead is unknown or
// declared dead: the steps pushed to it were reclaimed, so their handlers
// are stopped, and the worker registers again, unless the stream or the
// heartbeats, which may both hear it, did already.
func (w *GRPCWorker) rejoin(ctx context.Context, dead string) error {
	w.regMu.Lock()
	defer w.regMu.Unlock()
	w.mu.Lock()
	for _, h := range w.held {
		if h.worker == dead {
			h.cancel(errStepLost)
		}
	}
	again := w.id == dead
	w.mu.Unlock()
	if !again {
		return nil
	}
	return w.register(ctx)
}

// sleep waits about d (or until ctx ends) and returns the next backoff.
func (w *GRPCWorker) sleep(ctx context.Context, d time.Duration) time.Duration {
	t := time.NewTimer(d/2 + rand.N(d/2+1))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	return min(2*d, w.cfg.MaxBackoff)
}

// free is how many slots are free.
func (w *GRPCWorker) free() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cfg.Slots - len(w.held)
}

// pull holds the stream until ctx ends, opening it again after each
// failure, and starts every step it is pushed.
func (w *GRPCWorker) pull(ctx, work context.Context) error {
	backoff := w.cfg.MinBackoff
	for ctx.Err() == nil {
		// Open with the free slots as credit; with none, wait for one.
		if w.free() == 0 {
			select {
			case <-w.freed:
				continue
			case <-ctx.Done():
				return nil
			}
		}
		id := w.workerID()
		err := w.stream1(ctx, work, id, func() { backoff = w.cfg.MinBackoff })
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case fatal(err):
			return grpcError(err)
		case forgotten(err):
			// The server forgot the worker (declared dead): again.
			if rerr := w.rejoin(ctx, id); rerr != nil && fatal(rerr) {
				return rerr
			}
		}
		w.log.Warn("grpc worker: stream ended; connecting again", "error", err, "in", backoff)
		backoff = w.sleep(ctx, backoff)
	}
	return nil
}

// stream1 runs one Pull stream of registration id until it fails or ctx
// ends; connected is called once the server pushed a first step or
// accepted the stream.
func (w *GRPCWorker) stream1(ctx, work context.Context, id string, connected func()) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := w.api.Pull(sctx)
	s.RequestHeader().Set("Authorization", "Bearer "+w.cfg.Token)
	// Ending the context alone does not end a stream whose request body
	// is still open: close the response, which resets the stream.
	defer context.AfterFunc(sctx, func() { _ = s.CloseResponse() })()
	defer s.CloseResponse()
	w.mu.Lock()
	open := &weftv1.PullOpen{WorkerId: id, Handlers: w.handlerNames(), Namespaces: w.cfg.Namespaces, Credit: int32(w.cfg.Slots - len(w.held))}
	err := s.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Open{Open: open}})
	if err == nil {
		w.stream = s
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		if w.stream == s {
			w.stream = nil
		}
		w.mu.Unlock()
	}()
	if err != nil {
		_, rerr := s.Receive()
		return errors.Join(err, rerr)
	}
	first := true
	for {
		res, err := s.Receive()
		if err != nil {
			return err
		}
		if first {
			connected()
			first = false
		}
		for _, st := range res.GetSteps() {
			w.start(work, st, id)
		}
	}
}

// start runs a step pushed to registration worker in its slot.
func (w *GRPCWorker) start(work context.Context, st *weftv1.ClaimedStep, worker string) {
	step := st.Wire()
	ctx := context.WithValue(work, attemptKey{}, attemptRef{w: w, fence: st.GetFence(), worker: worker})
	// The handler's context continues the task's trace, as an engine's
	// handlers' do.
	ctx = propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": step.TraceParent, "tracestate": step.TraceState})
	ctx, cancel := context.WithCancelCause(ctx)
	if step.TimeoutMS > 0 {
		d := time.Duration(step.TimeoutMS) * time.Millisecond
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, d, stepTimedOut(d))
		cancelCause := cancel
		cancel = func(cause error) { cancelCause(cause); stop() }
	}
	key := keyOf(st.GetFence())
	w.mu.Lock()
	w.held[key] = &heldStep{fence: st.GetFence(), worker: worker, cancel: cancel}
	w.mu.Unlock()
	w.running.Add(1)
	go func() {
		defer w.running.Done()
		defer cancel(nil)
		log := w.log.With("task_id", step.TaskID, "step", step.Step, "attempt", step.Attempt)
		result, err := w.run(ctx, step)
		cause := context.Cause(ctx)
		preempted := err != nil && errors.Is(cause, ErrPreempted)
		var timedOut stepTimedOut
		if err != nil && errors.As(cause, &timedOut) && !errors.Is(err, cause) {
			// The failure says that the step timed out, as an engine's
			// handler's does.
			err = fmt.Errorf("%w (%v)", cause, err)
		}
		w.report(work, log, st.GetFence(), worker, result, err, preempted)
		w.mu.Lock()
		delete(w.held, key)
		s := w.stream
		if s != nil {
			// The slot is free: one more step. A stream that broke is
			// opened again with the free slots.
			if serr := s.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Credit{Credit: 1}}); serr != nil {
				log.Debug("grpc worker: grant credit", "error", serr)
			}
		}
		w.mu.Unlock()
		select {
		case w.freed <- struct{}{}:
		default:
		}
	}()
}

// run calls the step's handler, turning a panic into a failure.
func (w *GRPCWorker) run(ctx context.Context, step wire.ClaimedStep) (result json.RawMessage, err error) {
	h, ok := w.handlers[step.Handler]
	if !ok {
		return nil, Permanent(fmt.Errorf("no handler %q in this worker", step.Handler))
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(ctx, step)
}

// report sends the outcome of a step pushed to registration id, again
// after a failure that may pass, until the server answers or the fence is
// no longer the step's.
func (w *GRPCWorker) report(ctx context.Context, log *slog.Logger, fence *weftv1.Fence, id string, result json.RawMessage, herr error, preempted bool) {
	backoff := w.cfg.MinBackoff
	for attempt := 0; ; attempt++ {
		var err error
		var made callsMade
		switch {
		case herr == nil:
			if len(result) == 0 {
				result = json.RawMessage("null")
			}
			_, err = w.api.Complete(ctx, request(ctx, &weftv1.CompleteRequest{WorkerId: id, Fence: fence, Result: result}, w.cfg.Token))
		case errors.As(herr, &made):
			_, err = w.api.Calls(ctx, request(ctx, callsRequest(id, fence, made.calls), w.cfg.Token))
			if connect.CodeOf(err) == connect.CodeInvalidArgument {
				// Refused: the function's calls cannot be recorded; fail
				// the step rather than run it again and again.
				herr = Permanent(fmt.Errorf("the server refused the function's calls: %w", err))
				continue
			}
		default:
			_, err = w.api.Fail(ctx, request(ctx, failRequest(id, fence, herr, preempted), w.cfg.Token))
		}
		code := connect.CodeOf(err)
		switch {
		case err == nil:
			return
		case code == connect.CodeAborted || code == connect.CodeNotFound || code == connect.CodeFailedPrecondition || fatal(err):
			// The step is no longer this worker's: someone else runs it.
			log.Warn("grpc worker: outcome refused", "error", err)
			return
		case ctx.Err() != nil || attempt >= 10:
			log.Warn("grpc worker: outcome not reported; the step will be run again", "error", err)
			return
		}
		backoff = w.sleep(ctx, backoff)
	}
}

// heartbeats renews the leases of the held steps every interval the
// server gave at registration, cancels those the server says are lost,
// until hbCtx ends. run is Run's context: while it
// lasts, the worker asks for no preemption.
func (w *GRPCWorker) heartbeats(hbCtx, run context.Context) {
	w.mu.Lock()
	every := w.every
	w.mu.Unlock()
	if every <= 0 {
		every = time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-hbCtx.Done():
			return
		case <-t.C:
		}
		w.mu.Lock()
		fences := make([]*weftv1.Fence, 0, len(w.held))
		for _, h := range w.held {
			fences = append(fences, h.fence)
		}
		sent := w.id
		req := &weftv1.HeartbeatRequest{WorkerId: sent, Steps: fences}
		if run.Err() == nil {
			// Its free slots, so that the server may ask a full worker
			// to stop a preemptible step for one of higher priority; a
			// draining worker takes nothing new and is not asked.
			free := int32(w.cfg.Slots - len(w.held))
			req.Free, req.Handlers, req.Namespaces = &free, w.handlerNames(), w.cfg.Namespaces
		}
		w.mu.Unlock()
		res, err := w.api.Heartbeat(hbCtx, request(hbCtx, req, w.cfg.Token))
		if err != nil {
			if forgotten(err) && run.Err() == nil {
				// Declared dead: its steps are someone else's now.
				if rerr := w.rejoin(run, sent); rerr != nil {
					w.log.Warn("grpc worker: register again", "error", rerr)
				}
			} else if hbCtx.Err() == nil {
				w.log.Warn("grpc worker: heartbeat failed", "error", err)
			}
			continue
		}
		w.mu.Lock()
		for _, f := range res.Msg.GetLost() {
			if h, ok := w.held[keyOf(f)]; ok {
				h.cancel(errStepLost)
			}
		}
		for _, p := range res.Msg.GetPreempt() {
			f := p.GetFence()
			if h, ok := w.held[keyOf(f)]; ok {
				w.log.Info("grpc worker: step preempted", "step_id", f.GetStepId(), "reason", p.GetReason())
				h.cancel(ErrPreempted)
			}
		}
		w.mu.Unlock()
	}
}

// errStepLost is the cause of a step's context that the server took back
// (cancelled, timed out, or the worker declared dead).
var errStepLost = errors.New("the server took the step back")
