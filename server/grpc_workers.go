package server

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/internal/textsafe"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
)

// grpcWorkers serves weft.v1.WorkerService: the remote-worker protocol of
// workers.go, with the claim replaced by Pull, a stream on which the
// server claims for the worker (the engine's long-poll claim, in a loop)
// and pushes each step as soon as it is claimed.
type grpcWorkers struct{ s *Server }

// closed is a channel always ready: a select's case that does not wait.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// maxCredit bounds the steps a Pull stream may owe its worker, as a
// heartbeat bounds the fences it lists.
const maxCredit = 10000

func (g *grpcWorkers) Register(ctx context.Context, req *connect.Request[weftv1.RegisterRequest]) (*connect.Response[weftv1.RegisterResponse], error) {
	w := req.Msg.Wire()
	if err := checkText("", w); err != nil {
		return nil, err
	}
	out, err := g.s.register(ctx, w)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(weftv1.RegisterResponseOf(out)), nil
}

// Pull pushes the worker the steps the server claims for it, within the
// credit the worker grants: the first message opens the stream with the
// worker's free slots, every later one grants more as slots free. A
// step claimed and not delivered (the stream broke) is handed back at
// once, as a preempted step is: ready again, its attempt given back.
func (g *grpcWorkers) Pull(ctx context.Context, stream *connect.BidiStream[weftv1.PullRequest, weftv1.PullResponse]) error {
	s := g.s
	first, err := stream.Receive()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return fieldError("open", "is required: the first message opens the stream")
		}
		return err
	}
	open := first.GetOpen()
	if open == nil {
		return fieldError("open", "is required: the first message opens the stream")
	}
	if open.GetCredit() < 1 || open.GetCredit() > 100 {
		return fieldError("open.credit", "must be from 1 to 100, got %d", open.GetCredit())
	}
	workerID := open.GetWorkerId()
	ask := wire.ClaimRequest{Handlers: open.GetHandlers(), Namespaces: open.GetNamespaces(), Max: int(open.GetCredit()), WaitMS: s.opts.MaxPoll.Milliseconds()}
	if err := checkText("open.", struct {
		WorkerID string `json:"worker_id"`
		wire.ClaimRequest
	}{workerID, ask}); err != nil {
		return err
	}
	claim, err := s.checkClaim(ctx, ask)
	if err != nil {
		return err
	}
	who := owner(ctx)
	// The worker's grants arrive on their own goroutine, so that a claim
	// waiting for work never delays one.
	credits := make(chan int32, 16)
	refused := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Receive()
			if err != nil {
				// EOF: the worker grants no more; its stream ends with
				// its context.
				if !errors.Is(err, io.EOF) && ctx.Err() == nil {
					refused <- err
				}
				return
			}
			n := m.GetCredit()
			if m.GetOpen() != nil || n < 1 || n > 100 {
				refused <- fieldError("credit", "must be from 1 to 100 after the stream opened, got %d", n)
				return
			}
			select {
			case credits <- n:
			case <-ctx.Done():
				return
			}
		}
	}()
	// The headers go at once: the worker knows the stream is open.
	if err := stream.Send(nil); err != nil {
		return err
	}
	credit := int(open.GetCredit())
	grant := func(n int32) error {
		credit += int(n)
		if credit > maxCredit {
			return fieldError("credit", "the worker may be owed at most %d steps", maxCredit)
		}
		return nil
	}
	for {
		// Take the grants that arrived before claiming; with no credit
		// left, wait for one.
		var claimNow <-chan struct{}
		if credit > 0 {
			claimNow = closed
		}
		select {
		case n := <-credits:
			if err := grant(n); err != nil {
				return err
			}
			continue
		case err := <-refused:
			return err
		case <-ctx.Done():
			return ctx.Err()
		case <-claimNow:
		}
		claim.Max = min(credit, 100)
		steps, err := s.workers.Claim(ctx, workerID, who, claim)
		if err != nil {
			return err
		}
		if len(steps) == 0 {
			if s.workers.Stopping() {
				// Claims answer at once from now on: end the stream
				// rather than claim again without pause.
				return errorf(http.StatusServiceUnavailable, CodeUnavailable, "the server is shutting down: connect again")
			}
			continue
		}
		out := &weftv1.PullResponse{Steps: make([]*weftv1.ClaimedStep, len(steps))}
		for i, c := range steps {
			out.Steps[i] = weftv1.ClaimedStepOf(claimedStep(c))
		}
		if err := stream.Send(out); err != nil {
			s.handBack(ctx, workerID, who, steps)
			return err
		}
		credit -= len(steps)
	}
}

// handBack returns steps claimed for a stream that broke before it
// delivered them: ready again at once, their attempts given back, instead
// of waiting for the worker's next heartbeat or its lease.
func (s *Server) handBack(ctx context.Context, workerID, who string, steps []weft.RemoteStep) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, c := range steps {
		if _, err := s.workers.Fail(ctx, workerID, who, c.Fence, weft.Failure{Message: "the worker's stream ended before the step reached it",
			Preempted: true}); err != nil {
			s.log.Warn("hand back a step the stream did not deliver", "task_id", c.TaskID, "step", c.Name, "attempt", c.Attempts, "error", err)
		}
	}
	s.log.Debug("handed back undelivered steps", slog.Int("steps", len(steps)), slog.String("worker_id", workerID))
}

// checkWorker refuses a request without the id Register gave.
func checkWorker(id string) error {
	if id == "" {
		return fieldError("worker_id", "is required: the id Register returned")
	}
	if err := textsafe.Check(id); err != nil {
		return fieldError("worker_id", "%v", err)
	}
	return nil
}

func (g *grpcWorkers) Heartbeat(ctx context.Context, req *connect.Request[weftv1.HeartbeatRequest]) (*connect.Response[weftv1.HeartbeatResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	w := req.Msg.Wire()
	if err := checkText("", w); err != nil {
		return nil, err
	}
	out, err := g.s.workerHeartbeat(ctx, req.Msg.GetWorkerId(), w)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(weftv1.HeartbeatResponseOf(out)), nil
}

// Complete, like its REST twin, passes the result on as it is: the engine
// decides what becomes of one it cannot store.
func (g *grpcWorkers) Complete(ctx context.Context, req *connect.Request[weftv1.CompleteRequest]) (*connect.Response[weftv1.CompleteResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	out, err := g.s.complete(ctx, req.Msg.GetWorkerId(), req.Msg.Wire())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.CompleteResponse{Reported: weftv1.ReportedOf(out)}), nil
}

func (g *grpcWorkers) Fail(ctx context.Context, req *connect.Request[weftv1.FailRequest]) (*connect.Response[weftv1.FailResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	out, err := g.s.fail(ctx, req.Msg.GetWorkerId(), req.Msg.Wire())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.FailResponse{Reported: weftv1.ReportedOf(out)}), nil
}

func (g *grpcWorkers) Calls(ctx context.Context, req *connect.Request[weftv1.CallsRequest]) (*connect.Response[weftv1.CallsResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	out, err := g.s.calls(ctx, req.Msg.GetWorkerId(), req.Msg.Wire())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.CallsResponse{Reported: weftv1.ReportedOf(out)}), nil
}

func (g *grpcWorkers) Checkpoint(ctx context.Context, req *connect.Request[weftv1.CheckpointRequest]) (*connect.Response[weftv1.CheckpointResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	w := req.Msg.Wire()
	if err := checkJSON("checkpoint", w.Checkpoint); err != nil {
		return nil, err
	}
	if err := checkText("", w); err != nil {
		return nil, err
	}
	if err := g.s.checkpoint(ctx, req.Msg.GetWorkerId(), w); err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.CheckpointResponse{}), nil
}

func (g *grpcWorkers) Progress(ctx context.Context, req *connect.Request[weftv1.ProgressRequest]) (*connect.Response[weftv1.ProgressResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	w := req.Msg.Wire()
	if err := checkText("", w); err != nil {
		return nil, err
	}
	if err := g.s.progress(ctx, req.Msg.GetWorkerId(), w); err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.ProgressResponse{}), nil
}

func (g *grpcWorkers) Deregister(ctx context.Context, req *connect.Request[weftv1.DeregisterRequest]) (*connect.Response[weftv1.DeregisterResponse], error) {
	if err := checkWorker(req.Msg.GetWorkerId()); err != nil {
		return nil, err
	}
	if err := g.s.workers.Stop(ctx, req.Msg.GetWorkerId(), owner(ctx)); err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.DeregisterResponse{}), nil
}
