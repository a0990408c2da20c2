package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/store/sqlite"
	"github.com/weftrun/weft/workflow"
)

// fuzzServer is a real server on SQLite for the fuzz targets, with auth
// disabled (the bodies are what is fuzzed), short long polls, the chain
// workflow registered and a remote worker registered as workerID.
func fuzzServer(f *testing.F) (srv *server.Server, workerID string) {
	ctx := context.Background()
	s, err := sqlite.Open(ctx, filepath.Join(f.TempDir(), "weft.db"), sqlite.Options{})
	require.NoError(f, err)
	f.Cleanup(func() { s.Close() })
	e, err := weft.New(s, weft.Config{Logger: quietLogger(), PollInterval: 50 * time.Millisecond,
		HeartbeatInterval: 100 * time.Millisecond, LeaseTTL: time.Second})
	require.NoError(f, err)
	e.Handle("go.add", func(ctx context.Context, a *weft.Attempt) (any, error) { return map[string]int{"n": 1}, nil })
	w, err := workflow.Parse("chain.yaml", []byte(chainTemplate))
	require.NoError(f, err)
	require.NoError(f, e.Register(ctx, w))
	require.NoError(f, e.Start(ctx))
	f.Cleanup(func() { _ = e.Stop(context.Background()) })
	srv, err = server.New(e, server.Options{DisableAuth: true, MaxPoll: 20 * time.Millisecond, Logger: quietLogger()})
	require.NoError(f, err)
	f.Cleanup(func() { srv.Close() })
	workerID, err = e.Workers().Register(ctx, "fuzz", "anonymous") // the owner of every worker when auth is disabled
	require.NoError(f, err)
	return srv, workerID
}

// postChecked posts body to path and fails unless the answer is below 500
// and, for a 4xx, a JSON error body with a code and a message.
func postChecked(t testing.TB, srv *server.Server, path string, body []byte) {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	if rec.Code >= 500 {
		t.Fatalf("POST %s %q: %d %s", path, body, rec.Code, rec.Body.Bytes())
	}
	if rec.Code >= 400 {
		var e struct {
			Error struct{ Code, Message string }
		}
		if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e.Error.Code == "" || e.Error.Message == "" {
			t.Fatalf("POST %s %q: %d without a JSON error body with a code: %s", path, body, rec.Code, rec.Body.Bytes())
		}
	}
}

// FuzzRequestBodies posts arbitrary bodies to every route of the REST API
// that takes one, through the real server on SQLite: no body gives a 5xx,
// and every 4xx is a JSON error with a code.
func FuzzRequestBodies(f *testing.F) {
	srv, worker := fuzzServer(f)
	routes := []string{
		"/v1/workflows",
		"/v1/workflows/validate",
		"/v1/tasks",
		"/v1/tasks/1/cancel",
		"/v1/tasks/1/retry",
		"/v1/steps/1/retry",
		"/v1/steps/1/resolve",
		"/v1/steps/1/complete",
		"/v1/workers",
		"/v1/workers/" + worker + "/claim",
		"/v1/workers/" + worker + "/heartbeat",
		"/v1/workers/" + worker + "/complete",
		"/v1/workers/" + worker + "/fail",
		"/v1/workers/" + worker + "/checkpoint",
		"/v1/workers/" + worker + "/progress",
	}
	for i, body := range []string{
		`{"template":"namespace: f\nname: x\nversion: \"1\"\nsteps: [{name: a, handler: h}]\n"}`,
		`{"template":"steps: [","filename":"a.yaml"}`,
		`{"workflow":"api/chain","input":{"n":1},"idempotency_key":"k","priority":3}`,
		`{}`,
		``,
		`{"reason":"by hand"}`,
		`{"reason":"x\u0000"}`,
		`{"result":{"n":1},"reason":"fixed"}`,
		`{"name":"w","handlers":["go.add"]}`,
		`{"handlers":["go.add"],"max":2,"wait_ms":1}`,
		`{"steps":[{"step_id":1,"attempt":1,"lease_id":"1"}]}`,
		`{"fence":{"step_id":1,"attempt":1,"lease_id":"1"},"result":{"n":1}}`,
		`{"fence":{"step_id":1,"attempt":1,"lease_id":"1"},"error":"boom","retry_after_ms":10}`,
		`{"fence":{"step_id":1,"attempt":1,"lease_id":"1"},"checkpoint":{"at":3}}`,
		`{"fence":{"step_id":1,"attempt":1,"lease_id":"1"},"fraction":0.5,"message":"half"}`,
		"{\"workflow\":\"api/chain\",\"input\":{\"a\":\"\xff\"}}",
	} {
		f.Add(uint8(i), []byte(body))
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		postChecked(t, srv, routes[int(route)%len(routes)], body)
	})
}

// FuzzWorkerProtocol posts arbitrary bodies to the remote-worker protocol
// (claim, heartbeat, complete, fail, checkpoint, progress) of a registered
// worker, seeded with the messages of a real step it claimed: no message
// gives a 5xx, and every 4xx is a JSON error with a code.
func FuzzWorkerProtocol(f *testing.F) {
	srv, worker := fuzzServer(f)
	kinds := []string{"claim", "heartbeat", "complete", "fail", "checkpoint", "progress"}
	fence := `{"step_id":1,"attempt":1,"lease_id":"1"}`
	// Claim a real step for the seeds: its fence is the one reports use.
	postChecked(f, srv, "/v1/tasks", []byte(`{"workflow":"api/chain","input":{"n":1}}`))
	req := httptest.NewRequest(http.MethodPost, "/v1/workers/"+worker+"/claim", bytes.NewReader([]byte(`{"handlers":["go.add"],"max":1}`)))
	rec := httptest.NewRecorder()
	srv.ServeHTTP(rec, req)
	var claimed struct {
		Steps []struct {
			Fence json.RawMessage `json:"fence"`
		} `json:"steps"`
	}
	if rec.Code == 200 && json.Unmarshal(rec.Body.Bytes(), &claimed) == nil && len(claimed.Steps) > 0 {
		fence = string(claimed.Steps[0].Fence)
	}
	seeds := []string{
		`{"handlers":["go.add"],"namespaces":["api"],"max":1,"wait_ms":0}`,
		fmt.Sprintf(`{"steps":[%s]}`, fence),
		fmt.Sprintf(`{"fence":%s,"result":{"n":2}}`, fence),
		fmt.Sprintf(`{"fence":%s,"error":"boom","permanent":true}`, fence),
		fmt.Sprintf(`{"fence":%s,"checkpoint":[1,2,3]}`, fence),
		fmt.Sprintf(`{"fence":%s,"fraction":1,"message":"done"}`, fence),
	}
	for i, s := range seeds {
		f.Add(uint8(i), []byte(s))
	}
	f.Add(uint8(2), []byte(fmt.Sprintf(`{"fence":%s,"result":"\u0000"}`, fence)))
	f.Add(uint8(3), []byte(fmt.Sprintf("{\"fence\":%s,\"error\":\"\xff\"}", fence)))
	f.Fuzz(func(t *testing.T, kind uint8, body []byte) {
		postChecked(t, srv, "/v1/workers/"+worker+"/"+kinds[int(kind)%len(kinds)], body)
	})
}
