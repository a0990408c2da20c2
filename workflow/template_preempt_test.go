package workflow

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTemplatePreemptible(t *testing.T) {
	t.Parallel()
	w, err := Parse("report.yaml", []byte(`namespace: ops
name: report
version: "1"
steps:
  - name: crunch
    handler: ops.crunch
    priority: -5
    preemptible: true
  - name: mail
    handler: ops.mail
    depends_on: [crunch]
    preemptible: false
`))
	require.NoError(t, err)
	require.True(t, w.Steps[0].Preemptible)
	require.False(t, w.Steps[1].Preemptible)

	built := New("ops", "report", "1").Step("crunch", "ops.crunch", Preemptible())
	require.NoError(t, built.Validate())
	require.True(t, built.Steps[0].Preemptible)
}

func TestTemplatePreemptibleErrors(t *testing.T) {
	t.Parallel()
	head := "namespace: ops\nname: report\nversion: \"1\"\n"
	tests := []struct {
		name, yaml, want string
	}{
		{"not a boolean", head + "steps:\n  - name: a\n    handler: h\n    preemptible: yes please\n",
			`x.yaml:7: step "a": preemptible: must be true or false, got a string "yes please"`},
		{"a number", head + "steps:\n  - name: a\n    handler: h\n    preemptible: 1\n",
			`x.yaml:7: step "a": preemptible: must be true or false, got an integer "1"`},
		{"signal step", head + "steps:\n  - name: a\n    type: signal\n    signal: { name: go }\n    preemptible: true\n",
			`x.yaml:5: step "a": preemptible: a signal step runs no handler to preempt`},
		{"template", head + "templates:\n  - name: t\n    handler: h\n    preemptible: true\nsteps:\n  - name: a\n    handler: h\n",
			`templates: a template has only`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse("x.yaml", []byte(tt.yaml))
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			require.Equal(t, 1, strings.Count(err.Error(), "x.yaml:"), "one problem: %v", err)
		})
	}
}
