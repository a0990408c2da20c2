package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestInputSizeCap: --input @FILE and --input - read at most 16 MiB, and
// a larger input is an error naming where it came from, read no further
// (so /dev/zero cannot exhaust memory).
func TestInputSizeCap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tpl := writeFile(t, dir, "one.yaml", "namespace: cap\nname: one\nversion: \"1\"\nsteps:\n  - name: s\n    handler: exec\n    config: { command: [\"true\"] }\n")
	big := append([]byte(`{"a": 1}`), bytes.Repeat([]byte(" "), maxInputBytes)...)
	bigFile := filepath.Join(dir, "big.json")
	require.NoError(t, os.WriteFile(bigFile, big, 0o644))
	atLimit := filepath.Join(dir, "limit.json")
	require.NoError(t, os.WriteFile(atLimit, big[:maxInputBytes], 0o644))

	tests := []struct {
		name, input, stdin string
		wantErr            string
	}{
		{"file over the cap", "@" + bigFile, "", bigFile + " is larger than 16 MiB"},
		{"stdin over the cap", "-", string(big), "stdin is larger than 16 MiB"},
		{"file at the cap", "@" + atLimit, "", ""},
	}
	if _, err := os.Stat("/dev/zero"); err == nil {
		tests = append(tests, struct{ name, input, stdin, wantErr string }{"endless file", "@/dev/zero", "", "/dev/zero is larger than 16 MiB"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := filepath.Join(t.TempDir(), "weft.db")
			r := weftIn(t.Context(), tt.stdin, "submit", tpl, "--db", db, "--input", tt.input)
			if tt.wantErr == "" {
				requireCode(t, 0, r)
				return
			}
			require.NotEqual(t, 0, r.code)
			require.Contains(t, r.stderr, tt.wantErr)
			require.Less(t, len(r.stderr), 4096, "the input is not echoed")
			require.False(t, strings.Contains(r.stdout, "cap"), r.stdout)
		})
	}
}
