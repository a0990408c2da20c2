package client

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"

	"github.com/weftrun/weft/wire"
)

// TestSubmitSendsTheTrace: a submission carries the trace of its context
// as a traceparent header, which the server stores with the task; without
// a trace it sends none.
func TestSubmitSendsTheTrace(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	seen := make(chan string, 2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Get("traceparent")
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id": 1, "state": "pending"}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL, "")
	require.NoError(t, err)

	traced := propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
	_, err = c.Submit(traced, wire.SubmitRequest{Workflow: "ns/wf"})
	require.NoError(t, err)
	require.Equal(t, tp, <-seen)

	_, err = c.Submit(context.Background(), wire.SubmitRequest{Workflow: "ns/wf"})
	require.NoError(t, err)
	require.Empty(t, <-seen)
}
