package server_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/wire"
	"github.com/weftrun/weft/wire/weftv1"
)

// TestEveryProcedureDeclaresItsAccess: every method of the gRPC services
// is in the server's procedure table with a permission and a scope, and
// the table names no other, so a method added to a .proto file later
// cannot skip authentication, permission or scope.
func TestEveryProcedureDeclaresItsAccess(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	declared := map[string]server.Procedure{}
	for _, p := range en.srv.Procedures() {
		declared[p.Name] = p
	}
	var methods []string
	for _, file := range []protoreflect.FileDescriptor{weftv1.File_weft_v1_tasks_proto, weftv1.File_weft_v1_workers_proto} {
		for i := range file.Services().Len() {
			svc := file.Services().Get(i)
			require.Contains(t, server.GRPCServices, string(svc.FullName()), "the service is served")
			for j := range svc.Methods().Len() {
				methods = append(methods, "/"+string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name()))
			}
		}
	}
	for _, m := range methods {
		p, ok := declared[m]
		require.True(t, ok, "%s is missing from the procedure table", m)
		require.NotEmpty(t, p.Permission, "%s declares its permission", m)
		require.NoError(t, server.ValidatePermission(p.Permission), m)
		require.NotEmpty(t, p.Scope, "%s declares where its namespace is known", m)
		require.NotEqual(t, "path", p.Scope, "%s: a gRPC message has no path", m)
	}
	require.Len(t, declared, len(methods), "the procedure table names only methods of the services")
}

// rpcCase is how one procedure is called in the matrix, and how its
// answer to a key bound to one namespace depends on the namespace (the
// kinds of TestNamespaceScopeMatrix, and "worker": the worker's own
// credential reaches it, another's does not).
type rpcCase struct {
	kind string
	// call calls the procedure as token on fixture f's namespace, and
	// returns the namespaces of what the answer shows.
	call func(ctx context.Context, token string, f *scopeFixture) ([]string, error)
}

// TestGRPCScopeMatrix calls every gRPC procedure without a credential,
// with a key holding every permission but the procedure's, and with a key
// whose every permission holds in one namespace, on that namespace and on
// another, and with a key for every namespace: the answers are those of
// the procedure's REST twin (TestNamespaceScopeMatrix). A procedure
// without a case fails the test.
func TestGRPCScopeMatrix(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnvWith(t, open(t), server.Options{MaxPoll: 5 * time.Second}, nil)
		g := serveGRPC(t, en)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		fx := map[string]*scopeFixture{}
		for _, ns := range []string{outNS, inNS} {
			f := &scopeFixture{ns: ns, workflow: ns + "/gate", version: "1"}
			fx[ns] = f
			en.register(scopeTemplate(ns, "1"))
			for range 4 {
				var task wire.Task
				en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": f.workflow}, &task)
				f.tasks = append(f.tasks, task.ID)
			}
			f.task = f.tasks[0]
		}
		var grants []string
		for _, p := range server.Permissions {
			if p != server.PermAdmin {
				grants = append(grants, p+"@"+inNS)
			}
		}
		scoped, all := en.key(grants...), en.key(server.PermAdmin)

		// The workers: the scoped key's holds its namespace's remote
		// steps, the other key's one step of the other namespace.
		type holder struct {
			id     string
			fences []*weftv1.Fence
		}
		hold := func(token string, namespaces []string, want int) holder {
			reg, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "w", Handlers: []string{"remote.work"}, Namespaces: namespaces}, token))
			require.NoError(t, err)
			h := holder{id: reg.Msg.GetWorkerId()}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel() // the worker keeps the steps it was pushed
			stream := g.workers.Pull(ctx)
			stream.RequestHeader().Set("Authorization", "Bearer "+token)
			require.NoError(t, stream.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Open{Open: &weftv1.PullOpen{WorkerId: h.id,
				Handlers: []string{"remote.work"}, Credit: int32(want)}}}))
			for len(h.fences) < want {
				res, err := stream.Receive()
				require.NoError(t, err)
				for _, st := range res.GetSteps() {
					if namespaces == nil {
						require.Equal(t, inNS, st.GetNamespace(), "a worker of the scoped key is pushed its namespace's steps alone")
					}
					h.fences = append(h.fences, st.GetFence())
				}
			}
			require.NoError(t, stream.CloseRequest())
			require.NoError(t, stream.CloseResponse())
			return h
		}
		mine := hold(scoped, nil, 3)
		theirs := hold(all, []string{outNS}, 2)
		// worker is the worker and fence a key uses: its own in its
		// namespace, the other key's in the other.
		worker := func(f *scopeFixture, i int) (string, *weftv1.Fence) {
			if f.ns == inNS {
				return mine.id, mine.fences[i%len(mine.fences)]
			}
			return theirs.id, theirs.fences[i%len(theirs.fences)]
		}
		var last wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": inNS + "/gate"}, &last)

		namespacesOf := func(tasks []*weftv1.Task) []string {
			var out []string
			for _, task := range tasks {
				out = append(out, task.GetNamespace())
			}
			return out
		}
		// taskOf is the namespace of a task answer.
		taskOf := func(task *weftv1.Task, err error) ([]string, error) {
			if err != nil {
				return nil, err
			}
			return []string{task.GetNamespace()}, nil
		}
		cases := map[string]rpcCase{
			"/weft.v1.TaskService/Submit": {write, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				res, err := g.tasks.Submit(ctx, authed(&weftv1.SubmitRequest{Workflow: f.workflow}, token))
				if err != nil {
					return nil, err
				}
				return []string{res.Msg.GetTask().GetNamespace()}, nil
			}},
			"/weft.v1.TaskService/SubmitBatch": {write, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				_, err := g.tasks.SubmitBatch(ctx, authed(&weftv1.SubmitBatchRequest{Tasks: []*weftv1.SubmitRequest{{Workflow: inNS + "/gate"},
					{Workflow: f.workflow}}}, token))
				return nil, err
			}},
			"/weft.v1.TaskService/GetTask": {lookup, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				res, err := g.tasks.GetTask(ctx, authed(&weftv1.GetTaskRequest{Id: f.task}, token))
				return taskOf(msgOf(res).GetTask(), err)
			}},
			"/weft.v1.TaskService/ListTasks": {list, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				res, err := g.tasks.ListTasks(ctx, authed(&weftv1.ListTasksRequest{Namespace: f.ns}, token))
				if err != nil {
					return nil, err
				}
				all, err := g.tasks.ListTasks(ctx, authed(&weftv1.ListTasksRequest{}, token))
				if err != nil {
					return nil, err
				}
				return append(namespacesOf(res.Msg.GetTasks()), namespacesOf(all.Msg.GetTasks())...), nil
			}},
			"/weft.v1.TaskService/CancelTask": {lookup, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				res, err := g.tasks.CancelTask(ctx, authed(&weftv1.CancelTaskRequest{Id: f.tasks[3], Reason: "matrix"}, token))
				return taskOf(msgOf(res).GetTask(), err)
			}},
			"/weft.v1.TaskService/RetryTask": {lookup, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				res, err := g.tasks.RetryTask(ctx, authed(&weftv1.RetryTaskRequest{Id: f.tasks[3]}, token))
				return taskOf(msgOf(res).GetTask(), err)
			}},
			"/weft.v1.TaskService/SendSignal": {lookup, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				_, err := g.tasks.SendSignal(ctx, authed(&weftv1.SendSignalRequest{Id: f.task, Name: "other", Payload: []byte(`{"ok":true}`)}, token))
				return nil, err
			}},
			"/weft.v1.TaskService/WatchEvents": {list, func(ctx context.Context, token string, _ *scopeFixture) ([]string, error) {
				return g.firstEvents(ctx, token, last.ID)
			}},
			"/weft.v1.WorkerService/Register": {write, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				res, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "w", Handlers: []string{"remote.work"}, Namespaces: []string{f.ns}}, token))
				if err != nil {
					return nil, err
				}
				return res.Msg.GetNamespaces(), nil
			}},
			"/weft.v1.WorkerService/Pull": {write, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				return pullOne(ctx, g, token, f)
			}},
			"/weft.v1.WorkerService/Heartbeat": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, _ := worker(f, 0)
				held := mine.fences
				if f.ns != inNS {
					held = theirs.fences
				}
				_, err := g.workers.Heartbeat(ctx, authed(&weftv1.HeartbeatRequest{WorkerId: id, Steps: held}, token))
				return nil, err
			}},
			"/weft.v1.WorkerService/Checkpoint": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, fence := worker(f, 0)
				_, err := g.workers.Checkpoint(ctx, authed(&weftv1.CheckpointRequest{WorkerId: id, Fence: fence, Checkpoint: []byte(`{"at":1}`)}, token))
				return nil, err
			}},
			"/weft.v1.WorkerService/Progress": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, fence := worker(f, 0)
				fraction := 0.5
				_, err := g.workers.Progress(ctx, authed(&weftv1.ProgressRequest{WorkerId: id, Fence: fence, Fraction: &fraction}, token))
				return nil, err
			}},
			"/weft.v1.WorkerService/Complete": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, fence := worker(f, 1)
				_, err := g.workers.Complete(ctx, authed(&weftv1.CompleteRequest{WorkerId: id, Fence: fence, Result: []byte(`{"n":1}`)}, token))
				return nil, err
			}},
			"/weft.v1.WorkerService/Fail": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, fence := worker(f, 2)
				_, err := g.workers.Fail(ctx, authed(&weftv1.FailRequest{WorkerId: id, Fence: fence, Error: "boom"}, token))
				return nil, err
			}},
			"/weft.v1.WorkerService/Calls": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, fence := worker(f, 0)
				_, err := g.workers.Calls(ctx, authed(&weftv1.CallsRequest{WorkerId: id, Fence: fence,
					Calls: []*weftv1.Call{{Name: "nap", Kind: "sleep", SleepMs: 1}}}, token))
				return nil, err
			}},
			"/weft.v1.WorkerService/Deregister": {byWorkerKind, func(ctx context.Context, token string, f *scopeFixture) ([]string, error) {
				id, _ := worker(f, 0)
				_, err := g.workers.Deregister(ctx, authed(&weftv1.DeregisterRequest{WorkerId: id}, token))
				return nil, err
			}},
		}
		// Deregister last: the other cases use the workers.
		procs := en.srv.Procedures()
		slices.SortStableFunc(procs, func(a, b server.Procedure) int {
			return boolCmp(a.Name == "/weft.v1.WorkerService/Deregister", b.Name == "/weft.v1.WorkerService/Deregister")
		})
		for _, p := range procs {
			c, ok := cases[p.Name]
			require.True(t, ok, "%s has no case in the gRPC scope matrix", p.Name)
			t.Run(p.Name, func(t *testing.T) {
				// No credential, and every permission but the procedure's.
				_, err := c.call(ctx, "", fx[inNS])
				require.Equal(t, connect.CodeUnauthenticated, rpcCode(err), "without a credential: %v", err)
				var others []string
				for _, q := range server.Permissions {
					if q != p.Permission && q != server.PermAdmin && !isWildcardOf(q, p.Permission) {
						others = append(others, q)
					}
				}
				_, err = c.call(ctx, en.key(others...), fx[inNS])
				require.Equal(t, connect.CodePermissionDenied, rpcCode(err), "without %s: %v", p.Permission, err)
				require.Equal(t, server.CodeForbidden, errorDetail(t, err).GetCode())

				// Out of scope first, so that a write in scope does not
				// change what the other call finds.
				outSeen, outErr := c.call(ctx, scoped, fx[outNS])
				inSeen, inErr := c.call(ctx, scoped, fx[inNS])
				require.NotContains(t, []connect.Code{connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeNotFound},
					rpcCode(inErr), "in scope: %v", inErr)
				switch c.kind {
				case lookup:
					require.Equal(t, connect.CodeNotFound, rpcCode(outErr), "out of scope: %v", outErr)
					require.NotContains(t, outErr.Error(), outNS, "a lookup by id names nothing of the other namespace")
					require.Equal(t, server.CodeNotFound, errorDetail(t, outErr).GetCode())
				case write:
					require.Equal(t, connect.CodePermissionDenied, rpcCode(outErr), "out of scope: %v", outErr)
					require.Equal(t, server.CodeForbidden, errorDetail(t, outErr).GetCode())
				case byWorkerKind:
					require.Contains(t, []connect.Code{connect.CodeNotFound, connect.CodePermissionDenied}, rpcCode(outErr),
						"another credential's worker: %v", outErr)
				case list:
					require.NoError(t, outErr)
					require.NotContains(t, append(outSeen, inSeen...), outNS, "a list shows nothing of the other namespace")
					require.NotEmpty(t, inSeen)
				}
				// A key for every namespace reaches the other one.
				seen, err := c.call(ctx, all, fx[outNS])
				require.NotContains(t, []connect.Code{connect.CodeUnauthenticated, connect.CodePermissionDenied, connect.CodeNotFound},
					rpcCode(err), "with admin:*: %v", err)
				if c.kind == list {
					require.Contains(t, seen, outNS, "with admin:*, a list shows every namespace")
				}
			})
		}
		t.Run("a stream on another credential's worker", func(t *testing.T) {
			reg, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "theirs", Handlers: []string{"remote.work"}}, all))
			require.NoError(t, err)
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stream := g.workers.Pull(sctx)
			defer stream.CloseResponse()
			stream.RequestHeader().Set("Authorization", "Bearer "+scoped)
			_ = stream.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Open{Open: &weftv1.PullOpen{WorkerId: reg.Msg.GetWorkerId(),
				Handlers: []string{"remote.work"}, Credit: 1}}})
			_, err = stream.Receive()
			require.Equal(t, connect.CodeNotFound, rpcCode(err), "%v", err)
		})
	})
}

// The matrix's kinds of answer out of scope (TestNamespaceScopeMatrix's,
// and a worker's).
const (
	lookup       = "lookup"
	write        = "write"
	list         = "list"
	byWorkerKind = "worker"
)

func boolCmp(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// isWildcardOf reports whether grant q holds perm through its resource's
// wildcard.
func isWildcardOf(q, perm string) bool {
	for i := range perm {
		if perm[i] == ':' {
			return q == perm[:i]+":*"
		}
	}
	return false
}

// pullOne submits a task of f's namespace, registers a worker as token
// and pulls f's namespace's steps on a stream until it is pushed one.
func pullOne(ctx context.Context, g *grpcEnv, token string, f *scopeFixture) ([]string, error) {
	var task wire.Task
	g.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": f.workflow}, &task)
	var id string
	if reg, err := g.workers.Register(ctx, authed(&weftv1.RegisterRequest{Name: "puller", Handlers: []string{"remote.work"}}, token)); err == nil {
		id = reg.Msg.GetWorkerId()
	} else if connect.CodeOf(err) != connect.CodeUnauthenticated && connect.CodeOf(err) != connect.CodePermissionDenied {
		return nil, fmt.Errorf("register: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := g.workers.Pull(ctx)
	defer stream.CloseResponse()
	if token != "" {
		stream.RequestHeader().Set("Authorization", "Bearer "+token)
	}
	if err := stream.Send(&weftv1.PullRequest{Msg: &weftv1.PullRequest_Open{Open: &weftv1.PullOpen{WorkerId: id,
		Handlers: []string{"remote.work"}, Namespaces: []string{f.ns}, Credit: 1}}}); err != nil {
		if _, rerr := stream.Receive(); rerr != nil {
			return nil, rerr
		}
		return nil, err
	}
	res, err := stream.Receive()
	if err != nil {
		return nil, err
	}
	var seen []string
	for _, st := range res.GetSteps() {
		seen = append(seen, st.GetNamespace())
	}
	return seen, nil
}

// msgOf is a response's message, nil for none.
func msgOf[T any](res *connect.Response[T]) *T {
	if res == nil {
		return nil
	}
	return res.Msg
}

// TestGRPCDocsNameEveryProcedure: docs/grpc.md names every procedure of
// the procedure table.
func TestGRPCDocsNameEveryProcedure(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "docs", "grpc.md"))
	require.NoError(t, err)
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	for _, p := range en.srv.Procedures() {
		name := p.Name[strings.LastIndexByte(p.Name, '/')+1:]
		require.Contains(t, string(doc), "`"+name+"`", "docs/grpc.md names %s", p.Name)
	}
}
