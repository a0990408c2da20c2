package workflow_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/workflow"
)

func TestRetentionYAML(t *testing.T) {
	t.Parallel()
	const head = "namespace: shop\nname: r\nversion: \"1\"\nsteps:\n  - name: a\n    handler: h\n"
	tests := []struct {
		name, yaml string
		want       map[string]time.Duration
		err        string
	}{
		{"days and hours", "retention: { completed: 7d, failed: 12h, cancelled: 1d, expired: 90m }\n",
			map[string]time.Duration{"completed": 7 * 24 * time.Hour, "failed": 12 * time.Hour, "cancelled": 24 * time.Hour, "expired": 90 * time.Minute}, ""},
		{"zero keeps forever", "retention: { completed: 0s, failed: 1d }\n", map[string]time.Duration{"failed": 24 * time.Hour}, ""},
		{"none", "", map[string]time.Duration{}, ""},
		{"unknown state", "retention: { running: 1d }\n", nil, `tpl.yaml:7: retention: unknown key "running"`},
		{"bad duration", "retention: { completed: soon }\n", nil, `tpl.yaml:7: retention.completed: invalid duration "soon"`},
		{"negative", "retention: { completed: -1h }\n", nil, `must not be negative`},
		{"not a mapping", "retention: 7d\n", nil, `tpl.yaml:7: retention`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w, err := workflow.Parse("tpl.yaml", []byte(head+tt.yaml))
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, w.Retention.ByState())
		})
	}
	// Stored as JSON and read back, as the engine does.
	w, err := workflow.Parse("tpl.yaml", []byte(head+"retention: { completed: 7d }\n"))
	require.NoError(t, err)
	b, err := json.Marshal(w)
	require.NoError(t, err)
	var back workflow.Workflow
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, map[string]time.Duration{"completed": 7 * 24 * time.Hour}, back.Retention.ByState())
}
