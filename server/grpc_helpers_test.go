package server_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/wire/weftv1"
	"github.com/weftrun/weft/wire/weftv1/weftv1connect"
)

// grpcEnv is an env's API served over HTTP/1.1 and cleartext HTTP/2, with
// gRPC clients of it.
type grpcEnv struct {
	*env
	url     string
	tasks   weftv1connect.TaskServiceClient
	workers weftv1connect.WorkerServiceClient
}

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do with
// -plaintext.
func h2cClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p}}
}

// serveGRPC serves en's API with cleartext HTTP/2, and returns gRPC
// (protocol) clients of it.
func serveGRPC(t *testing.T, en *env) *grpcEnv {
	t.Helper()
	hs := httptest.NewUnstartedServer(en.srv)
	hs.Config.Protocols = new(http.Protocols)
	hs.Config.Protocols.SetHTTP1(true)
	hs.Config.Protocols.SetUnencryptedHTTP2(true)
	hs.Start()
	t.Cleanup(hs.Close)
	hc := h2cClient()
	// An HTTP/2 connection is busy for the server until its client closes
	// it: close it before the server, which waits for it.
	t.Cleanup(hc.CloseIdleConnections)
	return &grpcEnv{env: en, url: hs.URL, tasks: weftv1connect.NewTaskServiceClient(hc, hs.URL, connect.WithGRPC()),
		workers: weftv1connect.NewWorkerServiceClient(hc, hs.URL, connect.WithGRPC())}
}

// authed is a request carrying token as a bearer credential ("" none).
func authed[T any](msg *T, token string) *connect.Request[T] {
	req := connect.NewRequest(msg)
	if token != "" {
		req.Header().Set("Authorization", "Bearer "+token)
	}
	return req
}

// rpcCode is the gRPC code of err (0 for none).
func rpcCode(err error) connect.Code {
	if err == nil {
		return 0
	}
	return connect.CodeOf(err)
}

// errorDetail is the weft code and field an error carries.
func errorDetail(t *testing.T, err error) *weftv1.ErrorDetail {
	t.Helper()
	var ce *connect.Error
	require.True(t, errors.As(err, &ce), "%v is a gRPC error", err)
	for _, d := range ce.Details() {
		v, derr := d.Value()
		require.NoError(t, derr)
		if ed, ok := v.(*weftv1.ErrorDetail); ok {
			return ed
		}
	}
	t.Fatalf("error %v carries no ErrorDetail", err)
	return nil
}

// firstEvents opens WatchEvents from the start of the history as token
// and reads events until one of task last, returning their namespaces.
func (g *grpcEnv) firstEvents(ctx context.Context, token string, last int64) ([]string, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := g.tasks.WatchEvents(ctx, authed(&weftv1.WatchEventsRequest{After: "start"}, token))
	if err != nil {
		return nil, err
	}
	defer stream.Close()
	var seen []string
	for stream.Receive() {
		ev := stream.Msg().GetEvent()
		if ev == nil {
			continue
		}
		seen = append(seen, ev.GetNamespace())
		if ev.GetTaskId() == last {
			return seen, nil
		}
	}
	return seen, stream.Err()
}
