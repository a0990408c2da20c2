package weftproc

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestProc(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		script string
		stop   func(p *Proc)
		exit   string // how it exited
		tail   string // its stderr's last line
		stops  bool   // runs until stopped
	}{
		{name: "exits by itself", script: `echo one >&2; echo two >&2; exit 3`, stop: func(p *Proc) { _ = p.Wait() }, exit: "exit status 3", tail: "two"},
		{name: "stops on SIGTERM", script: `trap 'echo bye >&2; exit 0' TERM; echo up >&2; while :; do sleep 0.05; done`, stop: func(p *Proc) { p.Stop(10 * time.Second) }, exit: "exit status 0", tail: "bye", stops: true},
		{name: "killed when SIGTERM is not enough", script: `trap '' TERM; echo up >&2; while :; do sleep 0.05; done`, stop: func(p *Proc) { p.Stop(200 * time.Millisecond) }, exit: "signal: killed", tail: "up", stops: true},
		{name: "killed", script: `echo up >&2; while :; do sleep 0.05; done`, stop: func(p *Proc) { p.Kill() }, exit: "signal: killed", tail: "up", stops: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Proc{Name: "sh", Args: []string{"-c", tt.script}}
			require.NoError(t, p.Start("/bin/sh"))
			if tt.stops {
				// Up (its trap set) before it is stopped.
				require.Eventually(t, func() bool { return strings.Contains(p.Tail(1), "up") }, 10*time.Second, 10*time.Millisecond)
				require.False(t, p.Exited())
			}
			tt.stop(p)
			require.True(t, p.Exited())
			require.Equal(t, tt.exit, p.ExitState())
			require.Equal(t, tt.tail, p.Tail(1))
		})
	}
}

func TestWaitHealthy(t *testing.T) {
	t.Parallel()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/health/live" {
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer ts.Close()
	p := &Proc{Name: "sleep", Args: []string{"10"}}
	require.NoError(t, p.Start("/bin/sleep"))
	defer p.Kill()
	require.NoError(t, WaitHealthy(t.Context(), ts.URL, p))

	// A server that exited is not waited for.
	gone := &Proc{Name: "true"}
	require.NoError(t, gone.Start("/bin/true"))
	_ = gone.Wait()
	require.ErrorContains(t, WaitHealthy(t.Context(), "http://127.0.0.1:1", gone), "did not come up")
}

func TestTailAndParams(t *testing.T) {
	t.Parallel()
	require.Equal(t, "b\nc", Tail("a\nb\nc\n", 2))
	require.Equal(t, "a", Tail("a", 5))
	require.Equal(t, "db?search_path=s", WithParam("db", "search_path", "s"))
	require.Equal(t, "db?a=1&b=x+y", WithParam("db?a=1", "b", "x y"))
}
