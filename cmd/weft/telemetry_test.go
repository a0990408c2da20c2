package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// traceYAML has an exec step that returns the TRACEPARENT it sees.
const traceYAML = `namespace: test
name: traced
version: "1"
steps:
  - name: show
    handler: exec
    config:
      command: ["sh", "-c", "printf '{\"traceparent\":\"%s\"}' \"$TRACEPARENT\""]
`

// TestExecStepSeesTraceparent: TRACEPARENT in the CLI's environment is
// stored with the task, and its exec steps see the trace in their own
// TRACEPARENT: the caller's span itself with tracing off, the attempt's
// span (same trace, another span) with the console exporter, which then
// writes the spans on stderr.
func TestExecStepSeesTraceparent(t *testing.T) {
	t.Parallel()
	const (
		traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
		caller  = "00-" + traceID + "-00f067aa0ba902b7-01"
	)
	tests := []struct {
		name     string
		exporter string
		same     bool // the step sees the caller's traceparent itself
	}{
		{"tracing off", "", true},
		{"console exporter", "console", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := map[string]string{"TRACEPARENT": caller, "OTEL_TRACES_EXPORTER": tt.exporter, "WEFT_DB": filepath.Join(dir, "weft.db")}
			var stdout, stderr syncBuffer
			code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).
				execute(t.Context(), []string{"run", "--json", writeFile(t, dir, "trace.yaml", traceYAML)})
			require.Equal(t, 0, code, stderr.String())
			task := decodeTask(t, stdout.String())
			var got struct {
				TraceParent string `json:"traceparent"`
			}
			require.NoError(t, json.Unmarshal(stepByName(t, task, "show").Result, &got))
			require.True(t, strings.HasPrefix(got.TraceParent, "00-"+traceID+"-"), "the step is in the caller's trace: %q", got.TraceParent)
			if tt.same {
				require.Equal(t, caller, got.TraceParent)
				require.NotContains(t, stderr.String(), traceID, "no span is exported")
				return
			}
			require.NotEqual(t, caller, got.TraceParent, "the step's parent is its attempt's span")
			require.Contains(t, stderr.String(), `"Name":"process test/traced show"`)
			require.Contains(t, stderr.String(), `"Name":"send test/traced@1"`)
		})
	}
}

func TestTelemetryEnvErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"bad traceparent", map[string]string{"TRACEPARENT": "00-xyz"}, `TRACEPARENT "00-xyz" is not a W3C traceparent`},
		{"unknown exporter", map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, `OTEL_TRACES_EXPORTER "zipkin": want otlp, console or none`},
		{"grpc", map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "http/protobuf only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tt.env["WEFT_DB"] = filepath.Join(dir, "weft.db")
			var stdout, stderr syncBuffer
			code := newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return tt.env[k] }).
				execute(t.Context(), []string{"run", writeFile(t, dir, "trace.yaml", traceYAML)})
			require.Equal(t, exitUsage, code)
			require.Contains(t, stderr.String(), tt.want)
		})
	}
}
