package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// leaseCommands are the commands that run an engine, with the arguments
// that start each on a database of its own.
func leaseCommands(t *testing.T, dir string) map[string][]string {
	t.Helper()
	tpl := writeFile(t, dir, "one.yaml", "namespace: test\nname: one\nversion: \"1\"\nsteps:\n  - name: a\n    handler: exec\n    config: {command: [\"true\"]}\n")
	return map[string][]string{
		"worker": {"worker"},
		"serve":  {"serve", "--addr", "127.0.0.1:0", "--insecure-no-auth"},
		"run":    {"run", tpl},
	}
}

// runUntilStarted runs the CLI in-process until its engine logs that it
// started (or it exits), and returns its exit status and stderr.
func runUntilStarted(t *testing.T, env map[string]string, args []string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- newApp(strings.NewReader(""), &stdout, &stderr, func(k string) string { return env[k] }).execute(ctx, args)
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case code := <-done:
			return code, stderr.String()
		case <-deadline:
			t.Fatalf("%v did not start:\n%s", args, stderr.String())
		case <-time.After(10 * time.Millisecond):
			if strings.Contains(stderr.String(), `"msg":"engine started"`) {
				cancel()
				<-done
				return 0, stderr.String()
			}
		}
	}
}

// TestLeaseSettings: the engine's lease TTL and heartbeat interval are
// set from a flag, the environment or weft.yaml for every command that runs
// an engine, reach the engine, and are refused with the setting named when
// a lease could lapse between heartbeats.
func TestLeaseSettings(t *testing.T) {
	t.Parallel()
	type source struct {
		name string
		yaml string
		env  map[string]string
		args []string
	}
	good := []source{
		{name: "flag", args: []string{"--lease-ttl", "8s", "--heartbeat-interval", "2s"}},
		{name: "env", env: map[string]string{"WEFT_LEASE_TTL": "8s", "WEFT_HEARTBEAT_INTERVAL": "2s"}},
		{name: "file", yaml: "engine:\n  lease_ttl: 8s\n  heartbeat_interval: 2s\n"},
	}
	bad := []struct {
		source
		want string
	}{
		{source{name: "zero lease flag", args: []string{"--lease-ttl", "0s"}}, "--lease-ttl must be more than 0, got 0s"},
		{source{name: "negative heartbeat flag", args: []string{"--heartbeat-interval", "-1s"}}, "--heartbeat-interval must be more than 0, got -1s"},
		{source{name: "heartbeat not under lease", args: []string{"--lease-ttl", "6s"}}, "--lease-ttl (6s) must be at least twice --heartbeat-interval (5s)"},
		{source{name: "env", env: map[string]string{"WEFT_HEARTBEAT_INTERVAL": "20s"}}, "--lease-ttl (30s) must be at least twice --heartbeat-interval (engine.heartbeat_interval, from env WEFT_HEARTBEAT_INTERVAL) (20s)"},
		{source{name: "file", yaml: "engine:\n  lease_ttl: 1s\n"}, "--lease-ttl (engine.lease_ttl at "},
	}
	dir := t.TempDir()
	commands := leaseCommands(t, dir)
	setup := func(t *testing.T, s source) (map[string]string, string) {
		sub := t.TempDir()
		env := map[string]string{"WEFT_DB": filepath.Join(sub, "weft.db"), "WEFT_LOG_FORMAT": "json", "WEFT_LOG_LEVEL": "info"}
		for k, v := range s.env {
			env[k] = v
		}
		if s.yaml != "" {
			env["WEFT_CONFIG"] = writeFile(t, sub, "weft.yaml", s.yaml)
		}
		return env, sub
	}
	for name, args := range commands {
		for _, s := range good {
			t.Run(name+"/"+s.name, func(t *testing.T) {
				t.Parallel()
				env, _ := setup(t, s)
				code, stderr := runUntilStarted(t, env, append(append([]string(nil), args...), s.args...))
				require.Equal(t, 0, code, stderr)
				require.Regexp(t, `"msg":"engine started".*"lease_ttl_ms":8000,"heartbeat_interval_ms":2000`, stderr)
			})
		}
		for _, b := range bad {
			t.Run(name+"/refused/"+b.name, func(t *testing.T) {
				t.Parallel()
				env, _ := setup(t, b.source)
				code, stderr := runUntilStarted(t, env, append(append([]string(nil), args...), b.args...))
				require.Equal(t, exitUsage, code, stderr)
				require.Contains(t, stderr, b.want)
				require.NotContains(t, stderr, "engine started")
			})
		}
	}
}
