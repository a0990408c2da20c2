package builtin

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
)

// inTrace returns a context in the trace of traceparent tp.
func inTrace(tp string) context.Context {
	return propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier{"traceparent": tp})
}

// TestBuiltinsPassTheTrace: exec steps get the attempt's trace as
// TRACEPARENT, http steps as the traceparent header; with no trace,
// neither is set.
func TestBuiltinsPassTheTrace(t *testing.T) {
	t.Parallel()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, tt := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"in a trace", inTrace(tp), tp},
		{"no trace", context.Background(), ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, err := Exec(tt.ctx, Request{TaskID: 1, Step: "s", Attempt: 1,
				Config: json.RawMessage(`{"command": ["sh", "-c", "printf '{\"tp\":\"%s\"}' \"$TRACEPARENT\""]}`)})
			require.NoError(t, err)
			require.JSONEq(t, `{"tp":"`+tt.want+`"}`, string(res))

			srv, seen := recordingServer(t, http.StatusOK, nil, `{}`)
			_, err = HTTP(tt.ctx, srv.Client(), Request{TaskID: 1, Step: "s", Attempt: 1, Config: httpCfg(t, map[string]any{"url": srv.URL})})
			require.NoError(t, err)
			require.Equal(t, tt.want, (<-seen).header.Get("traceparent"))
		})
	}
}
