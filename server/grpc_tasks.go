package server

import (
	"context"
	"net/url"
	"strconv"
	"time"

	"connectrpc.com/connect"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
)

// grpcTasks serves weft.v1.TaskService: each procedure converts its
// message to the wire type of its REST twin, checks it as a JSON body is
// checked, and calls the same function.
type grpcTasks struct{ s *Server }

func (g *grpcTasks) Submit(ctx context.Context, req *connect.Request[weftv1.SubmitRequest]) (*connect.Response[weftv1.SubmitResponse], error) {
	w := req.Msg.Wire()
	if err := checkSubmission(w, ""); err != nil {
		return nil, err
	}
	res, err := g.s.submitOne(ctx, req.Header(), w)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(weftv1.SubmitResponseOf(res)), nil
}

// checkSubmission checks what decoding a JSON submission checks: its
// input is JSON, and no string holds text no store can keep.
func checkSubmission(w wire.SubmitRequest, prefix string) error {
	if err := checkJSON(prefix+"input", w.Input); err != nil {
		return err
	}
	return checkText(prefix, w)
}

func (g *grpcTasks) SubmitBatch(ctx context.Context, req *connect.Request[weftv1.SubmitBatchRequest]) (*connect.Response[weftv1.SubmitBatchResponse], error) {
	batch := wire.SubmitBatch{Tasks: make([]wire.SubmitRequest, len(req.Msg.GetTasks()))}
	for i, t := range req.Msg.GetTasks() {
		batch.Tasks[i] = t.Wire()
		if err := checkSubmission(batch.Tasks[i], "tasks["+strconv.Itoa(i)+"]."); err != nil {
			return nil, err
		}
	}
	res, err := g.s.submitMany(ctx, req.Header(), batch)
	if err != nil {
		return nil, err
	}
	out := &weftv1.SubmitBatchResponse{Tasks: make([]*weftv1.SubmitResponse, len(res.Tasks))}
	for i, t := range res.Tasks {
		out.Tasks[i] = weftv1.SubmitResponseOf(t)
	}
	return connect.NewResponse(out), nil
}

// checkID refuses an id that no task or step has, as a REST path does.
func checkID(field string, id int64) error {
	if id < 1 {
		return fieldError(field, "must be a positive integer, got %d", id)
	}
	return nil
}

func (g *grpcTasks) GetTask(ctx context.Context, req *connect.Request[weftv1.GetTaskRequest]) (*connect.Response[weftv1.GetTaskResponse], error) {
	if err := checkID("id", req.Msg.GetId()); err != nil {
		return nil, err
	}
	t, err := g.s.task(ctx, req.Msg.GetId())
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.GetTaskResponse{Task: weftv1.TaskOf(t)}), nil
}

// listQuery is a ListTasks filter as GET /v1/tasks's query parameters.
func listQuery(m *weftv1.ListTasksRequest) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("namespace", m.GetNamespace())
	set("workflow", m.GetWorkflow())
	set("state", m.GetState())
	if m.GetCreatedAfter() != nil {
		q.Set("created_after", m.GetCreatedAfter().AsTime().Format(time.RFC3339Nano))
	}
	if m.GetCreatedBefore() != nil {
		q.Set("created_before", m.GetCreatedBefore().AsTime().Format(time.RFC3339Nano))
	}
	if m.GetLimit() != 0 {
		q.Set("limit", strconv.Itoa(int(m.GetLimit())))
	}
	set("cursor", m.GetCursor())
	for _, t := range m.GetTags() {
		q.Add("tag", t)
	}
	if m.Attention != nil {
		q.Set("attention", strconv.FormatBool(m.GetAttention()))
	}
	if m.Active != nil {
		q.Set("active", strconv.FormatBool(m.GetActive()))
	}
	set("key", m.GetKey())
	set("schedule", m.GetSchedule())
	return q
}

func (g *grpcTasks) ListTasks(ctx context.Context, req *connect.Request[weftv1.ListTasksRequest]) (*connect.Response[weftv1.ListTasksResponse], error) {
	q := listQuery(req.Msg)
	if ae := checkValues(q); ae != nil {
		return nil, ae
	}
	list, err := g.s.taskList(ctx, q)
	if err != nil {
		return nil, err
	}
	out := &weftv1.ListTasksResponse{Tasks: make([]*weftv1.Task, len(list.Tasks)), NextCursor: list.NextCursor}
	for i, t := range list.Tasks {
		out.Tasks[i] = weftv1.TaskOf(t)
	}
	return connect.NewResponse(out), nil
}

// action runs a task action of a message with an id and a reason.
func (g *grpcTasks) action(ctx context.Context, id int64, reason string, do func(context.Context, int64, weft.Operator) error) (*weftv1.Task, error) {
	if err := checkID("id", id); err != nil {
		return nil, err
	}
	req := wire.TaskAction{Reason: reason}
	if err := checkText("", req); err != nil {
		return nil, err
	}
	t, err := g.s.taskAction(ctx, id, req, do)
	if err != nil {
		return nil, err
	}
	return weftv1.TaskOf(t), nil
}

func (g *grpcTasks) CancelTask(ctx context.Context, req *connect.Request[weftv1.CancelTaskRequest]) (*connect.Response[weftv1.CancelTaskResponse], error) {
	t, err := g.action(ctx, req.Msg.GetId(), req.Msg.GetReason(), g.s.engine.CancelAs)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.CancelTaskResponse{Task: t}), nil
}

func (g *grpcTasks) RetryTask(ctx context.Context, req *connect.Request[weftv1.RetryTaskRequest]) (*connect.Response[weftv1.RetryTaskResponse], error) {
	t, err := g.action(ctx, req.Msg.GetId(), req.Msg.GetReason(), g.s.engine.RetryAs)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.RetryTaskResponse{Task: t}), nil
}

func (g *grpcTasks) SendSignal(ctx context.Context, req *connect.Request[weftv1.SendSignalRequest]) (*connect.Response[weftv1.SendSignalResponse], error) {
	if err := checkID("id", req.Msg.GetId()); err != nil {
		return nil, err
	}
	name := req.Msg.GetName()
	if ae := checkValues(url.Values{"name": {name}}); ae != nil {
		return nil, ae
	}
	body := wire.SignalRequest{Payload: req.Msg.GetPayload()}
	if err := checkJSON("payload", body.Payload); err != nil {
		return nil, err
	}
	if err := checkText("", body); err != nil {
		return nil, err
	}
	res, err := g.s.signal(ctx, req.Msg.GetId(), name, body)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&weftv1.SendSignalResponse{Delivered: res.Delivered}), nil
}

// WatchEvents follows the history as GET /v1/events does.
func (g *grpcTasks) WatchEvents(ctx context.Context, req *connect.Request[weftv1.WatchEventsRequest], stream *connect.ServerStream[weftv1.WatchEventsResponse]) error {
	s := g.s
	v := url.Values{}
	for k, val := range map[string]string{"namespace": req.Msg.GetNamespace(), "workflow": req.Msg.GetWorkflow(), "after": req.Msg.GetAfter()} {
		if val != "" {
			v.Set(k, val)
		}
	}
	if t := req.Msg.GetTask(); t != 0 {
		v.Set("task", strconv.FormatInt(t, 10))
	}
	if ae := checkValues(v); ae != nil {
		return ae
	}
	q, err := s.historyQueryOf(ctx, v, "")
	if err != nil {
		return err
	}
	wake := make(chan struct{}, 1)
	unsubscribe := s.engine.Subscribe(func(weft.Event) {
		select {
		case wake <- struct{}{}:
		default:
		}
	})
	defer unsubscribe()
	// The headers go at once: a client sees the stream open before the
	// first event.
	if err := stream.Send(nil); err != nil {
		return err
	}
	poll := time.NewTicker(streamPoll)
	defer poll.Stop()
	for {
		events, err := s.engine.History(ctx, q)
		if err != nil {
			return err
		}
		for _, ev := range events {
			if err := stream.Send(&weftv1.WatchEventsResponse{Event: weftv1.EventOf(wire.EventOf(ev))}); err != nil {
				return err
			}
			q.After = ev.Cursor
		}
		if len(events) == q.Limit {
			continue
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-wake:
		case <-poll.C:
		}
	}
}
