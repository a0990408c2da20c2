package server_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/weftrun/weft"
	"github.com/weftrun/weft/server"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

// mixedTemplate runs Go, then a remote handler, then Go again.
const mixedTemplate = `namespace: demo
name: mixed
version: "1"
steps:
  - name: prepare
    handler: go.add
  - name: enrich
    handler: py.enrich
    depends_on: [prepare]
    config: { factor: 10 }
    retry: { max_attempts: 2, backoff: fixed, initial: 1h }
  - name: finish
    handler: go.add
    depends_on: [enrich]
`

type claimed struct {
	StepID  int64 `json:"step_id"`
	TaskID  int64 `json:"task_id"`
	Step    string
	Attempt int
	Input   map[string]any
	Deps    map[string]map[string]any
	Config  map[string]any
	Fence   map[string]any
	// Checkpoint is the step's last checkpoint.
	Checkpoint json.RawMessage
}

type worker struct {
	en    *env
	token string
	id    string
}

func (en *env) worker(t *testing.T, handlers ...string) *worker {
	w := &worker{en: en, token: en.key(server.PermWorkersConnect)}
	r := en.do("POST", "/v1/workers", w.token, map[string]any{"name": "gotest", "handlers": handlers, "namespaces": []string{"demo"}})
	require.Equal(t, 201, r.status, "%s", r.body)
	var reg struct {
		WorkerID            string `json:"worker_id"`
		HeartbeatIntervalMS int64  `json:"heartbeat_interval_ms"`
		LeaseTTLMS          int64  `json:"lease_ttl_ms"`
	}
	r.json(t, &reg)
	require.NotEmpty(t, reg.WorkerID)
	require.Less(t, 2*reg.HeartbeatIntervalMS, reg.LeaseTTLMS+1)
	w.id = reg.WorkerID
	return w
}

func (w *worker) post(suffix string, body any) response {
	return w.en.do("POST", "/v1/workers/"+w.id+suffix, w.token, body)
}

func (w *worker) claim(t *testing.T, waitMS int) []claimed {
	r := w.post("/claim", map[string]any{"handlers": []string{"py.enrich"}, "namespaces": []string{"demo"}, "max": 5, "wait_ms": waitMS})
	require.Equal(t, 200, r.status, "%s", r.body)
	var out struct{ Steps []claimed }
	r.json(t, &out)
	return out.Steps
}

func TestRemoteWorkerProtocol(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		en := newEnv(t, open(t), server.Options{MaxPoll: 20 * time.Second})
		en.register(mixedTemplate)
		w := en.worker(t, "py.enrich")
		require.Empty(t, w.claim(t, 0), "nothing to claim yet")

		// A long poll returns the step once the Go step before it completes.
		got := make(chan []claimed, 1)
		go func() { got <- w.claim(t, 15000) }()
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": 3}}, &task)
		steps := <-got
		require.Len(t, steps, 1)
		c := steps[0]
		require.Equal(t, "enrich", c.Step)
		require.Equal(t, 1, c.Attempt)
		require.Equal(t, float64(3), c.Deps["prepare"]["n"], "the Go step's result reaches the remote worker")
		require.Equal(t, float64(10), c.Config["factor"])

		r := w.post("/heartbeat", map[string]any{"steps": []any{c.Fence}})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"lost":[]`)
		require.Equal(t, 204, w.post("/checkpoint", map[string]any{"fence": c.Fence, "checkpoint": map[string]int{"done": 1}}).status)

		stale := map[string]any{"step_id": c.Fence["step_id"], "attempt": c.Fence["attempt"], "lease_id": "12345"}
		r = w.post("/complete", map[string]any{"fence": stale, "result": map[string]int{"n": 0}})
		require.Equal(t, 409, r.status, "%s", r.body)
		code, _ := r.errorCode(t)
		require.Equal(t, server.CodeStaleLease, code)
		r = w.post("/complete", map[string]any{"result": 1})
		require.Equal(t, 400, r.status)
		_, field := r.errorCode(t)
		require.Equal(t, "fence", field)

		// Not done yet: a snooze is no failure, and gives the attempt back;
		// it does not mix with a failure's options.
		r = w.post("/fail", map[string]any{"fence": c.Fence, "error": "not yet", "snooze_ms": 1, "permanent": true})
		require.Equal(t, 400, r.status, "%s", r.body)
		_, field = r.errorCode(t)
		require.Equal(t, "snooze_ms", field)
		r = w.post("/fail", map[string]any{"fence": c.Fence, "error": "not yet", "snooze_ms": 1})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"state":"waiting"`)
		var snoozed []claimed
		for deadline := time.Now().Add(15 * time.Second); len(snoozed) == 0 && time.Now().Before(deadline); {
			snoozed = w.claim(t, 1000)
		}
		require.Len(t, snoozed, 1)
		require.Equal(t, 1, snoozed[0].Attempt, "a snooze gives the attempt back")
		c = snoozed[0]

		// The first attempt fails and is retried by the step's policy.
		r = w.post("/fail", map[string]any{"fence": c.Fence, "error": "flaky", "retry_after_ms": 1})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Contains(t, string(r.body), `"state":"waiting"`)
		r = w.post("/complete", map[string]any{"fence": c.Fence, "result": map[string]int{"n": 30}})
		require.Equal(t, 409, r.status, "the failed attempt's fence no longer holds the step")

		var again []claimed
		deadline := time.Now().Add(15 * time.Second)
		for len(again) == 0 && time.Now().Before(deadline) {
			again = w.claim(t, 1000)
		}
		require.Len(t, again, 1)
		require.Equal(t, 2, again[0].Attempt)
		r = w.post("/complete", map[string]any{"fence": again[0].Fence, "result": map[string]int{"n": 30}})
		require.Equal(t, 200, r.status, "%s", r.body)

		done := en.waitTask(task.ID)
		require.Equal(t, state.TaskCompleted, done.State)
		require.JSONEq(t, `{"n":33}`, string(stepNamed(t, done, "finish").Result), "the remote result reaches the Go step after it")
		enrich := stepNamed(t, done, "enrich")
		require.Equal(t, w.id, enrich.EngineID)
		require.JSONEq(t, `{"done":1}`, string(enrich.Checkpoint))

		// Deregistered, the worker is told to register again.
		require.Equal(t, 204, en.do("DELETE", "/v1/workers/"+w.id, w.token, nil).status)
		r = w.post("/claim", map[string]any{"handlers": []string{"py.enrich"}})
		require.Equal(t, 409, r.status)
		code, _ = r.errorCode(t)
		require.Equal(t, server.CodeWorkerLost, code)
	})
}

func TestRemoteWorkerVanishes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		// The engine's lease TTL is 1s: a worker that stops heartbeating
		// loses its step to the reaper, and another worker gets it.
		en := newEnv(t, open(t), server.Options{})
		en.register(mixedTemplate)
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": 1}}, &task)
		gone := en.worker(t, "py.enrich")
		steps := gone.claim(t, 15000)
		require.Len(t, steps, 1)
		next := en.worker(t, "py.enrich")
		var again []claimed
		deadline := time.Now().Add(20 * time.Second)
		for len(again) == 0 && time.Now().Before(deadline) {
			again = next.claim(t, 2000)
		}
		require.Len(t, again, 1, "the vanished worker's step was reclaimed")
		require.Equal(t, 2, again[0].Attempt)
		r := gone.post("/complete", map[string]any{"fence": steps[0].Fence, "result": map[string]int{"n": 0}})
		require.Equal(t, 409, r.status, "the vanished worker's late outcome is refused")
		require.Equal(t, 200, next.post("/complete", map[string]any{"fence": again[0].Fence, "result": map[string]int{"n": 5}}).status)
		require.Equal(t, state.TaskCompleted, en.waitTask(task.ID).State)
	})
}

func TestRemoteWorkerBadInput(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{MaxPoll: time.Second})
	tok := en.key(server.PermWorkersConnect)
	for _, tt := range []struct {
		body  any
		field string
	}{
		{map[string]any{"name": "w"}, "handlers"},
		{map[string]any{"handlers": []string{"x"}}, "name"},
		{map[string]any{"name": "w", "handlers": []string{"bad name"}}, "handlers[0]"},
		{map[string]any{"name": strings.Repeat("w", 129), "handlers": []string{"x"}}, "name"},
		{map[string]any{"name": "w", "handlers": []string{strings.Repeat("h", 129)}}, "handlers[0]"},
		{map[string]any{"name": "w", "handlers": []string{"x", "x"}}, "handlers[1]"},
		{map[string]any{"name": "w", "handlers": []string{"x"}, "namespaces": []string{""}}, "namespaces[0]"},
	} {
		r := en.do("POST", "/v1/workers", tok, tt.body)
		require.Equal(t, 400, r.status, "%v", tt.body)
		_, field := r.errorCode(t)
		require.Equal(t, tt.field, field)
	}
	w := en.worker(t, "py.enrich")
	for _, tt := range []struct {
		body  any
		field string
	}{
		{map[string]any{"handlers": []string{"py.enrich"}, "wait_ms": 5000}, "wait_ms"},
		{map[string]any{"handlers": []string{"py.enrich"}, "max": 1000}, "max"},
		{map[string]any{"handlers": []string{"py.enrich"}, "max": "two"}, "max"},
		{map[string]any{"handlers": []string{"py.enrich", "weft.signal"}}, "handlers[1]"},
	} {
		r := w.post("/claim", tt.body)
		require.Equal(t, 400, r.status, "%v: %s", tt.body, r.body)
		_, field := r.errorCode(t)
		require.Equal(t, tt.field, field)
	}
	r := w.post("/fail", map[string]any{"fence": map[string]any{"step_id": 1, "attempt": 1, "lease_id": "5"}})
	require.Equal(t, 400, r.status)
	_, field := r.errorCode(t)
	require.Equal(t, "error", field)
}

// metricValue returns the sum of a metric's samples whose labels include
// every given name="value" pair.
func metricValue(t *testing.T, body, name string, labels ...string) float64 {
	t.Helper()
	sum, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndex(line, " ")+1:], 64)
		require.NoError(t, err, line)
		sum, found = sum+v, true
	}
	require.True(t, found, "no sample of %s%v in the scrape", name, labels)
	return sum
}

func TestMetricsMove(t *testing.T) {
	t.Parallel()
	en := newEnv(t, backends()["sqlite"](t), server.Options{})
	en.register(chainTemplate)
	en.register(mixedTemplate)
	scrape := func() string {
		r := en.do("GET", "/metrics", "", nil)
		require.Equal(t, 200, r.status)
		return string(r.body)
	}
	const n = 4
	var wg sync.WaitGroup
	ids := make([]int64, n)
	for i := range n {
		var task wire.Task
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "input": map[string]int{"n": i}}, &task)
		ids[i] = task.ID
	}
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); en.waitTask(id) }()
	}
	wg.Wait()
	var delayed wire.Task
	en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "api/chain", "run_at": time.Now().Add(time.Hour)}, &delayed)
	var mixed wire.Task
	en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": 1}}, &mixed)
	w := en.worker(t, "py.enrich")
	c := w.claim(t, 15000)
	require.Len(t, c, 1)
	require.Equal(t, 200, w.post("/fail", map[string]any{"fence": c[0].Fence, "error": "once"}).status)

	body := scrape()
	require.Equal(t, float64(n+1), metricValue(t, body, "weft_tasks_submitted_total", `namespace="api"`))
	require.Equal(t, float64(2*n), metricValue(t, body, "weft_steps_completed_total", `namespace="api"`, `outcome="completed"`, `worker="engine"`))
	require.Equal(t, float64(2*n), metricValue(t, body, "weft_steps_claimed_total", `namespace="api"`, `worker="engine"`))
	require.Equal(t, float64(1), metricValue(t, body, "weft_steps_claimed_total", `namespace="demo"`, `worker="remote"`))
	require.Equal(t, float64(1), metricValue(t, body, "weft_step_retries_total", `namespace="demo"`))
	require.Equal(t, float64(2*n), metricValue(t, body, "weft_step_duration_seconds_count", `namespace="api"`, `outcome="completed"`))
	require.Equal(t, float64(1), metricValue(t, body, "weft_queue_depth", `namespace="api"`, `state="waiting"`))
	require.Equal(t, float64(1), metricValue(t, body, "weft_queue_depth", `namespace="api"`, `state="pending"`))
	require.Positive(t, metricValue(t, body, "weft_http_requests_total", `route="POST /v1/tasks"`, `code="201"`))
	for _, line := range strings.Split(body, "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			require.True(t, strings.HasPrefix(line, "weft_"), "every metric is prefixed weft_: %s", line)
		}
	}

}

// TestStaleLeaseHidesHolder: a worker whose step was taken over is told
// that its fence no longer holds the step, never which worker holds it
// now. Another credential's worker id is answered 404 on every worker
// route; a stale_lease must not name it either.
func TestStaleLeaseHidesHolder(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, open storeFactory) {
		// A lease that outlasts a slow machine: A sends no heartbeat
		// before the routes below and must stay alive until then.
		en := newEnvWith(t, open(t), server.Options{MaxPoll: 20 * time.Second}, func(c *weft.Config) { c.LeaseTTL = time.Minute })
		en.register(mixedTemplate)
		en.ok(201, "POST", "/v1/tasks", map[string]any{"workflow": "demo/mixed", "input": map[string]int{"n": 1}}, nil)
		a, b := en.worker(t, "py.enrich"), en.worker(t, "py.enrich") // each under a key of its own
		stepsA := a.claim(t, 15000)
		require.Len(t, stepsA, 1)
		lost := stepsA[0].Fence

		// A's lease is lost (as when the reply to its claim went astray),
		// and B claims the step.
		lease, err := strconv.ParseInt(lost["lease_id"].(string), 10, 64)
		require.NoError(t, err)
		n, err := en.st.ReleaseLease(t.Context(), a.id, lease)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		stepsB := b.claim(t, 15000)
		require.Len(t, stepsB, 1)
		require.Equal(t, stepsA[0].StepID, stepsB[0].StepID)

		for _, tt := range []struct {
			name   string
			route  string
			body   map[string]any
			status int
			code   string
		}{
			{"complete", "/complete", map[string]any{"fence": lost, "result": map[string]int{"n": 0}}, 409, server.CodeStaleLease},
			{"fail", "/fail", map[string]any{"fence": lost, "error": "boom"}, 409, server.CodeStaleLease},
			{"fail preempted", "/fail", map[string]any{"fence": lost, "error": "asked to stop", "preempted": true}, 409, server.CodeStaleLease},
			{"checkpoint", "/checkpoint", map[string]any{"fence": lost, "checkpoint": map[string]int{"done": 1}}, 409, server.CodeStaleLease},
			{"progress", "/progress", map[string]any{"fence": lost, "fraction": 0.5}, 409, server.CodeStaleLease},
			// A heartbeat answers the lost fence in its body, not as an error.
			{"heartbeat", "/heartbeat", map[string]any{"steps": []any{lost}}, 200, ""},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := a.post(tt.route, tt.body)
				if tt.route == "/heartbeat" && r.status == http.StatusConflict {
					// Seen once under a fully loaded CI machine: A was
					// declared lost before its heartbeat. What this test
					// holds to is below: no answer names B.
					code, _ := r.errorCode(t)
					require.Equal(t, server.CodeWorkerLost, code)
					require.NotContains(t, string(r.body), b.id)
					return
				}
				require.Equal(t, tt.status, r.status, "%s", r.body)
				if tt.code != "" {
					code, _ := r.errorCode(t)
					require.Equal(t, tt.code, code)
				}
				if tt.code == "" {
					require.Contains(t, string(r.body), `"lost":[{`, "the heartbeat tells A its step is lost")
				}
				require.NotContains(t, string(r.body), b.id, "the answer names the step's new holder")
			})
		}
	})
}
