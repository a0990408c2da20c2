package wireworker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft/wire"
)

// fakeServer answers the remote-worker routes: registration, heartbeats,
// and claims that hand out each step of steps once; it records the
// completions and failures it receives.
type fakeServer struct {
	mu        sync.Mutex
	steps     []wire.ClaimedStep
	completed []wire.Complete
	failed    []wire.Fail
	refuse    bool // answer 400 to completions
	down      int  // answer 503 to this many completions first
}

func (f *fakeServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") != "Bearer tok" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	reply := func(v any) { _ = json.NewEncoder(w).Encode(v) }
	switch r.URL.Path {
	case "/v1/workers":
		reply(wire.WorkerRegistered{WorkerID: "w1", LeaseTTLMS: 400, HeartbeatIntervalMS: 100})
	case "/v1/workers/w1/heartbeat":
		w.WriteHeader(http.StatusNoContent)
	case "/v1/workers/w1/claim":
		var cr wire.ClaimResponse
		cr.Steps, f.steps = f.steps, nil
		reply(cr)
	case "/v1/workers/w1/complete":
		if f.down > 0 {
			f.down--
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if f.refuse {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var c wire.Complete
		_ = json.NewDecoder(r.Body).Decode(&c)
		f.completed = append(f.completed, c)
		w.WriteHeader(http.StatusNoContent)
	case "/v1/workers/w1/fail":
		var fl wire.Fail
		_ = json.NewDecoder(r.Body).Decode(&fl)
		f.failed = append(f.failed, fl)
		w.WriteHeader(http.StatusNoContent)
	default:
		w.WriteHeader(http.StatusNotFound)
	}
}

func (f *fakeServer) ended() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.completed) + len(f.failed)
}

func TestWorker(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		refuse  bool // the server refuses the results
		down    int  // completions the server does not answer first
		abandon bool
		// what the server must have received
		completed, failed, retries int
	}{
		{name: "completes each step", completed: 2},
		{name: "retries a completion the server does not answer", down: 2, completed: 2, retries: 2},
		{name: "fails a step whose result is refused", refuse: true, failed: 2},
		{name: "abandoned steps are not completed", abandon: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := &fakeServer{refuse: tt.refuse, down: tt.down}
			srv.steps = []wire.ClaimedStep{{StepID: 1, TaskID: 10, Step: "r", Attempt: 1}, {StepID: 2, TaskID: 11, Step: "r", Attempt: 1}}
			ts := httptest.NewServer(srv)
			defer ts.Close()
			worked := make(chan int64, 2)
			w := &Worker{Base: ts.URL, Token: "tok", Name: "test", Handler: "remote.work", Client: ts.Client()}
			w.Work = func(ctx context.Context, s wire.ClaimedStep) json.RawMessage {
				if tt.abandon {
					w.Abandon()
				}
				worked <- s.TaskID
				return json.RawMessage(`{"ok": true}`)
			}
			ctx, cancel := context.WithCancel(t.Context())
			done := make(chan struct{})
			go func() { w.Run(ctx); close(done) }()
			require.ElementsMatch(t, []int64{10, 11}, []int64{<-worked, <-worked})
			if tt.completed+tt.failed > 0 {
				require.Eventually(t, func() bool { return srv.ended() == tt.completed+tt.failed }, 10*time.Second, 10*time.Millisecond)
			}
			cancel()
			<-done
			srv.mu.Lock()
			defer srv.mu.Unlock()
			require.Len(t, srv.completed, tt.completed)
			require.Len(t, srv.failed, tt.failed)
			require.Equal(t, tt.retries, w.Retries())
			require.Equal(t, 400*time.Millisecond, w.Lease())
			for _, f := range srv.failed {
				require.True(t, f.Permanent)
			}
		})
	}
}
