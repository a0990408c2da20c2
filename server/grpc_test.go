package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/wire/weftv1/weftv1connect"
)

const grpcFlow = `namespace: shop
name: flow
version: "1"
steps:
  - name: approval
    type: signal
    signal: {name: go_live}
  - name: work
    handler: remote.work
    depends_on: [approval]
`

// TestGRPCRefusals: a refused call is answered with the gRPC code of its
// REST status, REST's message, and REST's code and field in its detail.
func TestGRPCRefusals(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	g := serveGRPC(t, en)
	en.register(grpcFlow)
	ctx := t.Context()
	tests := []struct {
		name  string
		call  func() error
		code  connect.Code
		wcode string
		field string
	}{
		{"workflow missing", func() error {
			_, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "workflow"},
		{"input not JSON", func() error {
			_, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{Workflow: "shop/flow", Input: []byte("{")}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "input"},
		{"NUL in a tag", func() error {
			_, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{Workflow: "shop/flow", Tags: map[string]string{"k": "a\x00b"}}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "tags.k"},
		{"batch item named by index", func() error {
			_, err := g.tasks.SubmitBatch(ctx, authed(&weftv1.SubmitBatchRequest{Tasks: []*weftv1.SubmitRequest{{Workflow: "shop/flow"},
				{Workflow: "nope"}}}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "tasks[1].workflow"},
		{"unknown workflow", func() error {
			_, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{Workflow: "shop/none"}, en.admin))
			return err
		}, connect.CodeNotFound, server.CodeNotFound, ""},
		{"unknown task", func() error {
			_, err := g.tasks.GetTask(ctx, authed(&weftv1.GetTaskRequest{Id: 999999}, en.admin))
			return err
		}, connect.CodeNotFound, server.CodeNotFound, ""},
		{"id missing", func() error {
			_, err := g.tasks.CancelTask(ctx, authed(&weftv1.CancelTaskRequest{}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "id"},
		{"list state", func() error {
			_, err := g.tasks.ListTasks(ctx, authed(&weftv1.ListTasksRequest{State: "sleepy"}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "state"},
		{"list limit", func() error {
			_, err := g.tasks.ListTasks(ctx, authed(&weftv1.ListTasksRequest{Limit: 5000}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "limit"},
		{"events cursor", func() error {
			s, err := g.tasks.WatchEvents(ctx, authed(&weftv1.WatchEventsRequest{After: "garbage"}, en.admin))
			if err != nil {
				return err
			}
			defer s.Close()
			s.Receive()
			return s.Err()
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "after"},
		{"worker unknown", func() error {
			_, err := g.workers.Heartbeat(ctx, authed(&weftv1.HeartbeatRequest{WorkerId: "w-none"}, en.admin))
			return err
		}, connect.CodeNotFound, server.CodeNotFound, ""},
		{"fence missing", func() error {
			_, err := g.workers.Complete(ctx, authed(&weftv1.CompleteRequest{WorkerId: "w-none"}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "fence"},
		{"register without handlers", func() error {
			_, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "w"}, en.admin))
			return err
		}, connect.CodeInvalidArgument, server.CodeInvalidField, "handlers"},
		{"a key that is no key", func() error {
			_, err := g.tasks.GetTask(ctx, authed(&weftv1.GetTaskRequest{Id: 1}, "weft_0000000000000000_nope"))
			return err
		}, connect.CodeUnauthenticated, server.CodeUnauthenticated, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.call()
			require.Equal(t, tt.code, rpcCode(err), "%v", err)
			d := errorDetail(t, err)
			require.Equal(t, tt.wcode, d.GetCode())
			require.Equal(t, tt.field, d.GetField())
		})
	}
}

// TestGRPCTasksAndWorker drives a task through the gRPC API alone: submit,
// list, watch its events, signal it, have its remote step pushed to a
// worker's stream and completed, and resume the events after a cursor.
func TestGRPCTasksAndWorker(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{MaxPoll: 5 * time.Second})
		g := serveGRPC(t, en)
		en.register(grpcFlow)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		key := en.key("tasks:*@shop", "workers:connect@shop")

		sub, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{Workflow: "shop/flow", Input: []byte(`{"n":2}`), IdempotencyKey: "k1"}, key))
		require.NoError(t, err)
		task := sub.Msg.GetTask()
		require.Equal(t, "shop", task.GetNamespace())
		again, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{Workflow: "shop/flow", IdempotencyKey: "k1"}, key))
		require.NoError(t, err)
		require.True(t, again.Msg.GetDuplicate())
		require.Equal(t, task.GetId(), again.Msg.GetTask().GetId())
		batch, err := g.tasks.SubmitBatch(ctx, authed(&weftv1.SubmitBatchRequest{Tasks: []*weftv1.SubmitRequest{{Workflow: "shop/flow"}, {Workflow: "shop/flow"}}}, key))
		require.NoError(t, err)
		require.Len(t, batch.Msg.GetTasks(), 2)

		// Pages of one task each, newest first, as GET /v1/tasks gives.
		var ids []int64
		cursor := ""
		for {
			page, err := g.tasks.ListTasks(ctx, authed(&weftv1.ListTasksRequest{Workflow: "shop/flow", Limit: 1, Cursor: cursor}, key))
			require.NoError(t, err)
			for _, tk := range page.Msg.GetTasks() {
				ids = append(ids, tk.GetId())
			}
			if cursor = page.Msg.GetNextCursor(); cursor == "" {
				break
			}
		}
		require.Equal(t, []int64{batch.Msg.GetTasks()[1].GetTask().GetId(), batch.Msg.GetTasks()[0].GetTask().GetId(), task.GetId()}, ids)

		// A worker holds its stream before the step is ready.
		reg, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "w", Handlers: []string{"remote.work"}}, key))
		require.NoError(t, err)
		require.Equal(t, []string{"shop"}, reg.Msg.GetNamespaces())
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		stream := g.workers.Pull(sctx)
		defer stream.CloseResponse()
		stream.RequestHeader().Set("Authorization", "Bearer "+key)
		require.NoError(t, stream.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Open{Open: &weftv1.PullOpen{WorkerId: reg.Msg.GetWorkerId(),
			Handlers: []string{"remote.work"}, Credit: 1}}}))

		events, err := g.tasks.WatchEvents(ctx, authed(&weftv1.WatchEventsRequest{Task: task.GetId(), After: "start"}, key))
		require.NoError(t, err)
		defer events.Close()

		// Once the engine has begun the wait, the signal is delivered
		// (before, it is kept for the wait).
		en.waitStep(task.GetId(), 0, state.StepWaiting)
		sig, err := g.tasks.SendSignal(ctx, authed(&weftv1.SendSignalRequest{Id: task.GetId(), Name: "go_live", Payload: []byte(`"yes"`)}, key))
		require.NoError(t, err)
		require.True(t, sig.Msg.GetDelivered())

		pushed, err := stream.Receive()
		require.NoError(t, err)
		require.Len(t, pushed.GetSteps(), 1)
		st := pushed.GetSteps()[0]
		require.Equal(t, task.GetId(), st.GetTaskId())
		require.JSONEq(t, `{"n":2}`, string(st.GetInput()))
		hb, err := g.workers.Heartbeat(ctx, authed(&weftv1.HeartbeatRequest{WorkerId: reg.Msg.GetWorkerId(), Steps: []*weftv1.Fence{st.GetFence()}}, key))
		require.NoError(t, err)
		require.Empty(t, hb.Msg.GetLost())
		done, err := g.workers.Complete(ctx, authed(&weftv1.CompleteRequest{WorkerId: reg.Msg.GetWorkerId(), Fence: st.GetFence(), Result: []byte(`{"ok":true}`)}, key))
		require.NoError(t, err)
		require.Equal(t, "completed", done.Msg.GetReported().GetState())
		// The fence is spent: a second report is refused as stale.
		_, err = g.workers.Complete(ctx, authed(&weftv1.CompleteRequest{WorkerId: reg.Msg.GetWorkerId(), Fence: st.GetFence(), Result: []byte(`{}`)}, key))
		require.Contains(t, []connect.Code{connect.CodeAborted, connect.CodeFailedPrecondition}, rpcCode(err), "%v", err)

		// The task's events, up to its completion; then the same stream
		// resumed after the first event's cursor starts at the second.
		var seen []*weftv1.Event
		for events.Receive() {
			ev := events.Msg().GetEvent()
			seen = append(seen, ev)
			if ev.GetStep() == "" && ev.GetTo() == "completed" {
				break
			}
		}
		require.NoError(t, events.Err())
		require.Greater(t, len(seen), 2)
		resumed, err := g.tasks.WatchEvents(ctx, authed(&weftv1.WatchEventsRequest{Task: task.GetId(), After: seen[0].GetCursor()}, key))
		require.NoError(t, err)
		defer resumed.Close()
		require.True(t, resumed.Receive(), "%v", resumed.Err())
		require.Equal(t, seen[1].GetCursor(), resumed.Msg().GetEvent().GetCursor())

		got, err := g.tasks.GetTask(ctx, authed(&weftv1.GetTaskRequest{Id: task.GetId()}, key))
		require.NoError(t, err)
		require.Equal(t, "completed", got.Msg.GetTask().GetState())
		require.Len(t, got.Msg.GetTask().GetSteps(), 2)

		// Cancel and retry answer the task as it now stands.
		c, err := g.tasks.CancelTask(ctx, authed(&weftv1.CancelTaskRequest{Id: batch.Msg.GetTasks()[0].GetTask().GetId(), Reason: "not needed"}, key))
		require.NoError(t, err)
		require.Equal(t, "cancelled", c.Msg.GetTask().GetState())
		// A conflict with the task's state is a failed precondition, with
		// REST's message.
		_, err = g.tasks.RetryTask(ctx, authed(&weftv1.RetryTaskRequest{Id: c.Msg.GetTask().GetId()}, key))
		require.Equal(t, connect.CodeFailedPrecondition, rpcCode(err), "%v", err)
		require.Equal(t, server.CodeConflict, errorDetail(t, err).GetCode())
		var audit wire.AuditList
		en.ok(200, "GET", "/v1/tasks/"+itoa(c.Msg.GetTask().GetId())+"/audit", nil, &audit)
		require.True(t, containsReason(audit, "not needed"), "the reason is in the audit trail")

		_, err = g.workers.Deregister(ctx, authed(&weftv1.DeregisterRequest{WorkerId: reg.Msg.GetWorkerId()}, key))
		require.NoError(t, err)
	})
}

func containsReason(a wire.AuditList, reason string) bool {
	for _, e := range a.Audit {
		if strings.Contains(e.Reason, reason) {
			return true
		}
	}
	return false
}

// TestGRPCProtocols: the API answers gRPC over cleartext HTTP/2, and
// Connect over HTTP/1.1, and serves reflection without a credential.
func TestGRPCProtocols(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	g := serveGRPC(t, en)
	en.register(grpcFlow)
	tests := []struct {
		name   string
		client *http.Client
		opts   []connect.ClientOption
	}{
		{"grpc over h2c", h2cClient(), []connect.ClientOption{connect.WithGRPC()}},
		{"connect over HTTP/1.1", http.DefaultClient, nil},
		{"grpc-web over HTTP/1.1", http.DefaultClient, []connect.ClientOption{connect.WithGRPCWeb()}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := weftv1connect.NewTaskServiceClient(tt.client, g.url, tt.opts...)
			res, err := c.Submit(t.Context(), authed(&weftv1.SubmitRequest{Workflow: "shop/flow"}, en.admin))
			require.NoError(t, err)
			require.Positive(t, res.Msg.GetTask().GetId())
		})
	}
	t.Run("reflection", func(t *testing.T) {
		t.Parallel()
		// A reflection request lists the services: the body is a gRPC
		// frame of ServerReflectionRequest{list_services: ""}.
		req, err := http.NewRequestWithContext(t.Context(), "POST", g.url+"/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
			strings.NewReader("\x00\x00\x00\x00\x02\x3a\x00"))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/grpc")
		req.Header.Set("TE", "trailers")
		resp, err := h2cClient().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body := make([]byte, 4096)
		n, _ := resp.Body.Read(body)
		for n < len(body) && !strings.Contains(string(body[:n]), "WorkerService") {
			m, err := resp.Body.Read(body[n:])
			n += m
			if err != nil {
				break
			}
		}
		require.Contains(t, string(body[:n]), "weft.v1.TaskService")
		require.Contains(t, string(body[:n]), "weft.v1.WorkerService")
	})
}

// TestGRPCStreamEndsWithItsCredential: a revoked key ends the streams it
// opened, as it ends REST's event streams.
func TestGRPCStreamEndsWithItsCredential(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{CredentialRecheck: 20 * time.Millisecond})
	g := serveGRPC(t, en)
	token, k, err := server.NewAPIKey("doomed", []string{server.PermTasksRead})
	require.NoError(t, err)
	require.NoError(t, en.st.CreateAPIKey(t.Context(), k))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	stream, err := g.tasks.WatchEvents(ctx, authed(&weftv1.WatchEventsRequest{}, token))
	require.NoError(t, err)
	defer stream.Close()
	require.NoError(t, en.st.RevokeAPIKey(ctx, k.ID))
	for stream.Receive() {
	}
	require.Equal(t, connect.CodeUnauthenticated, rpcCode(stream.Err()), "%v", stream.Err())
	require.NoError(t, ctx.Err(), "the stream ended before the test's deadline")
}

// TestGRPCCrossSiteWithoutAuth: with authentication disabled, a call a
// browser sends from another site is refused, as REST refuses it.
func TestGRPCCrossSiteWithoutAuth(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{DisableAuth: true})
	g := serveGRPC(t, en)
	en.register(grpcFlow)
	tests := []struct {
		name, origin string
		code         connect.Code
	}{
		{"another site", "http://evil.example", connect.CodePermissionDenied},
		{"no origin", "", 0},
	}
	for _, tt := range tests {
		req := connect.NewRequest(&weftv1.SubmitRequest{Workflow: "shop/flow"})
		if tt.origin != "" {
			req.Header().Set("Origin", tt.origin)
		}
		_, err := g.tasks.Submit(t.Context(), req)
		require.Equal(t, tt.code, rpcCode(err), "%s: %v", tt.name, err)
	}
}

// TestGRPCPullEndsWhenTheEngineStops: once the engine's Stop has begun,
// claims answer at once with nothing; a worker's pull stream then ends
// with Unavailable (go to another server) instead of claiming again
// without pause.
func TestGRPCPullEndsWhenTheEngineStops(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{MaxPoll: 5 * time.Second})
	g := serveGRPC(t, en)
	key := en.key("workers:connect")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	reg, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "w", Handlers: []string{"remote.work"}}, key))
	require.NoError(t, err)
	stream := g.workers.Pull(ctx)
	defer stream.CloseResponse()
	stream.RequestHeader().Set("Authorization", "Bearer "+key)
	require.NoError(t, stream.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Open{Open: &weftv1.PullOpen{WorkerId: reg.Msg.GetWorkerId(),
		Handlers: []string{"remote.work"}, Credit: 1}}}))
	require.NoError(t, en.e.Stop(ctx))
	for {
		if _, err = stream.Receive(); err != nil {
			break
		}
	}
	require.Equal(t, connect.CodeUnavailable, rpcCode(err), "%v", err)
	require.Contains(t, err.Error(), "shutting down")
	require.NoError(t, ctx.Err(), "the stream ended before the test's deadline")
}
