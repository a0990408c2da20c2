package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// TestBadBytesOutcomesEndEverywhere: a result or an error that holds a
// NUL, a \u0000 escape, a lone surrogate or bytes that are not UTF-8 ends
// its step the same way whoever ran it, a Go handler of the engine or a
// remote worker through the worker protocol, on every store: a result that
// cannot be stored fails the step for good at its first attempt, bytes
// that are not UTF-8 read as U+FFFD, and an error is retried by the step's
// policy with its text sanitized. The worker's report is answered 200 with
// what was recorded; no step is reclaimed and run again behind its
// attempts' back.
func TestBadBytesOutcomesEndEverywhere(t *testing.T) {
	t.Parallel()
	type want struct {
		state    state.Step
		attempts int
		result   any    // the decoded result, when completed
		error    string // a substring of the error, when failed
	}
	cases := []struct {
		name string
		// local is what the Go handler returns; remote the body of the
		// worker's report (%s: its fence) to suffix.
		local  func() (any, error)
		suffix string
		remote string
		want   want
	}{
		{"nul in a result string", func() (any, error) { return map[string]string{"v": "a\x00b"}, nil },
			"/complete", `{"fence":%s,"result":{"v":"a\u0000b"}}`,
			want{state.StepFailed, 1, nil, `result cannot be stored: result.v contains a NUL character`}},
		{"nul escape in a raw result", func() (any, error) { return json.RawMessage(`[1,"\u0000"]`), nil },
			"/complete", `{"fence":%s,"result":[1,"\u0000"]}`,
			want{state.StepFailed, 1, nil, `result cannot be stored: result[1] contains a NUL character`}},
		{"lone surrogate in a result", func() (any, error) { return json.RawMessage(`{"k":"\ud800"}`), nil },
			"/complete", `{"fence":%s,"result":{"k":"\ud800"}}`,
			want{state.StepFailed, 1, nil, `result cannot be stored: result.k contains a \u escape of a lone UTF-16 surrogate`}},
		{"result not utf8", func() (any, error) { return json.RawMessage("\"a\xffb\""), nil },
			"/complete", "{\"fence\":%s,\"result\":\"a\xffb\"}",
			want{state.StepCompleted, 1, "a\uFFFDb", ""}},
		{"nul in an error", func() (any, error) { return nil, errors.New("bad \x00 error") },
			"/fail", `{"fence":%s,"error":"bad \u0000 error"}`,
			want{state.StepFailed, 2, nil, "bad \uFFFD error"}},
		{"error not utf8", func() (any, error) { return nil, errors.New("bad \xff error") },
			"/fail", "{\"fence\":%s,\"error\":\"bad \xff error\"}",
			want{state.StepFailed, 2, nil, "bad \uFFFD error"}},
		{"nul in a permanent error", func() (any, error) { return nil, weft.Permanent(errors.New("x\x00y")) },
			"/fail", `{"fence":%s,"error":"x\u0000y","permanent":true}`,
			want{state.StepFailed, 1, nil, "x\uFFFDy"}},
	}
	eachBackend(t, func(t *testing.T, open storeFactory) {
		// The test's worker sends no heartbeat: a lease that outlasts a
		// loaded machine's pauses, so no step is reclaimed under it.
		en := newEnvWith(t, open(t), server.Options{}, func(c *weft.Config) { c.LeaseTTL = time.Minute })
		token := en.key(server.PermWorkersConnect)
		r := en.do("POST", "/v1/workers", token, map[string]any{"name": "bytes", "handlers": []string{"remote.h"}, "namespaces": []string{"bytes"}})
		require.Equal(t, 201, r.status, "%s", r.body)
		var reg wire.WorkerRegistered
		r.json(t, &reg)
		for i, c := range cases {
			for _, where := range []string{"local", "remote"} {
				name := fmt.Sprintf("%s-%d", where, i)
				handler := "remote.h"
				if where == "local" {
					handler = "local." + name
					en.e.Handle(handler, func(context.Context, *weft.Attempt) (any, error) { return c.local() })
				}
				en.register(fmt.Sprintf("namespace: bytes\nname: %s\nversion: \"1\"\nsteps:\n  - name: s\n    handler: %s\n"+
					"    retry: { max_attempts: 2, backoff: fixed, initial: 10ms }\n", name, handler))
				var task wire.Task
				en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "bytes/" + name}, &task)
				claims := 0
				if where == "remote" {
					// The worker runs each attempt it is given, as long as
					// the task runs: more attempts than the step's are
					// runs behind their count.
					for claims < 4 {
						var got task0
						en.ok(200, "GET", "/v1/tasks/"+itoa(task.ID), nil, &got)
						if got.State.Terminal() {
							break
						}
						r := en.do("POST", "/v1/workers/"+reg.WorkerID+"/claim", token,
							map[string]any{"handlers": []string{"remote.h"}, "max": 1, "wait_ms": 300})
						require.Equal(t, 200, r.status, "%s", r.body)
						var cr wire.ClaimResponse
						r.json(t, &cr)
						if len(cr.Steps) == 0 {
							continue
						}
						claims++
						fence, err := json.Marshal(cr.Steps[0].Fence)
						require.NoError(t, err)
						r = en.do("POST", "/v1/workers/"+reg.WorkerID+c.suffix, token, fmt.Sprintf(c.remote, fence))
						require.Equal(t, 200, r.status, "%s %s: the report must be recorded: %s", name, c.name, r.body)
						var rep wire.Reported
						r.json(t, &rep)
						require.True(t, utf8.ValidString(rep.Error) && !strings.Contains(rep.Error, "\x00"), "%q", rep.Error)
					}
				}
				got := en.waitTask(task.ID)
				s := stepNamed(t, got, "s")
				require.Equal(t, c.want.state, s.State, "%s (%s): %s", c.name, where, s.Error)
				require.Equal(t, c.want.attempts, s.Attempts, "%s (%s)", c.name, where)
				if where == "remote" {
					require.Equal(t, c.want.attempts, claims, "%s: the worker ran the step once per attempt", c.name)
				}
				require.True(t, utf8.ValidString(s.Error) && !strings.Contains(s.Error, "\x00"), "%s: %q", c.name, s.Error)
				if c.want.state == state.StepCompleted {
					var v any
					require.NoError(t, json.Unmarshal(s.Result, &v))
					require.Equal(t, c.want.result, v, c.name)
				} else {
					require.Contains(t, s.Error, c.want.error, "%s (%s)", c.name, where)
				}
				var trail wire.AuditList
				en.ok(200, "GET", "/v1/tasks/"+itoa(task.ID)+"/audit", nil, &trail)
				for _, e := range trail.Audit {
					require.NotContains(t, e.Reason, "lease lapsed", "%s (%s): reclaimed", c.name, where)
				}
			}
		}
	})
}

// task0 is the state of a task alone.
type task0 struct {
	State state.Task `json:"state"`
}
