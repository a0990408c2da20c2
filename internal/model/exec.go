package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
	"github.com/weftrun/weft/wire"
)

// How the operations are carried out: through the REST API, or through
// the CLI with --server as an operator would (one in ten, by Arg).

// rest calls the API. A 5xx other than 503 is a violation; the status and
// the error (for any status ≥ 300) are returned.
func (r *runner) rest(ctx context.Context, method, path string, body, out any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.c.base+path, rd)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+r.c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode >= 500 && resp.StatusCode != http.StatusServiceUnavailable {
		r.violate(InvServerErr, "%s %s answered %d: %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, strings.TrimSpace(string(data)))
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: decode %q: %w", method, path, data, err)
		}
	}
	return resp.StatusCode, nil
}

// cli runs `weft ARGS --server URL` and returns its exit code and output.
func (r *runner) cli(ctx context.Context, args ...string) (int, string) {
	cmd := exec.CommandContext(ctx, r.c.bin, append(args, "--server", r.c.base)...)
	cmd.Env = r.c.env
	out, err := cmd.CombinedOutput()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else {
			code = -1
		}
		r.cfg.logf("op %d: weft %s: exit %d: %s", r.cur, strings.Join(args, " "), code, strings.TrimSpace(string(out)))
	}
	return code, strings.TrimSpace(string(out))
}

func viaCLI(op Op) bool { return op.Arg%10 == 9 }

// act carries out an operator action as op says: through the CLI (`weft
// ARGS`), or through REST (POST path with body, the answer into out). It
// reports whether the action succeeded; a refusal (the target ended
// meanwhile, …) is no error.
func (r *runner) act(ctx context.Context, op Op, args []string, path string, body, out any) bool {
	if viaCLI(op) {
		code, _ := r.cli(ctx, args...)
		return code == 0
	}
	_, err := r.rest(ctx, "POST", path, body, out)
	return err == nil
}

func (r *runner) do(ctx context.Context, op Op) error {
	switch op.Kind {
	case OpSubmitPlain, OpSubmitDAG, OpSubmitFlaky, OpSubmitSignal, OpSubmitSignalTO, OpSubmitChild,
		OpSubmitBatch, OpSubmitKeyed, OpSubmitSupersede, OpSubmitRemote, OpSubmitLong, OpSubmitFunction:
		_, err := r.submit(ctx, op)
		return err
	case OpCancel:
		return r.cancel(ctx, op)
	case OpRetryTask:
		return r.retryTask(ctx, op)
	case OpRetryStep, OpResolveStep:
		return r.stepAction(ctx, op)
	case OpSignal:
		return r.signal(ctx, op)
	case OpPause, OpResume, OpLimit, OpUnlimit, OpPauseUnknown:
		return r.policy(ctx, op)
	case OpDelete:
		return r.delete(ctx, op)
	case OpPrune:
		return r.prune(ctx, op)
	case OpSchedule:
		return r.schedule(ctx, op)
	case OpStopEngine:
		return r.stopEngine(ctx, op)
	case OpKillEngine:
		return r.killEngine(ctx, op)
	case OpLeaseExpiry:
		r.c.remote.Abandon()
		lease := r.c.remote.Lease()
		if lease == 0 {
			lease = r.c.lease
		}
		r.remoteSilentUntil = time.Now().Add(lease + 3*time.Second)
		return nil
	case OpWait:
		time.Sleep(time.Duration(op.Arg%5+1) * 40 * time.Millisecond)
		return nil
	}
	return fmt.Errorf("unknown operation %q", op.Kind)
}

func (r *runner) submit(ctx context.Context, op Op) (int64, error) {
	wf := submitWorkflow[op.Kind]
	req := wire.SubmitRequest{Workflow: wf, Input: json.RawMessage(fmt.Sprintf(`{"op": %d}`, r.cur))}
	switch op.Kind {
	case OpSubmitKeyed:
		req.IdempotencyKey = fmt.Sprintf("k%d", op.Arg%4)
	case OpSubmitSupersede:
		req.IdempotencyKey = fmt.Sprintf("s%d", op.Arg%3)
		req.OnConflict = "supersede"
	}
	if viaCLI(op) && op.Kind != OpSubmitSupersede {
		args := []string{"submit", wf, "--input", string(req.Input)}
		if req.IdempotencyKey != "" {
			args = append(args, "--key", req.IdempotencyKey)
		}
		code, out := r.cli(ctx, args...)
		if code != 0 {
			return 0, fmt.Errorf("weft submit: exit %d: %s", code, out)
		}
		var id int64
		var err error = errors.New("no task id")
		for _, l := range strings.Split(out, "\n") {
			if id, err = strconv.ParseInt(strings.TrimSpace(l), 10, 64); err == nil {
				break
			}
		}
		if err != nil {
			return 0, fmt.Errorf("weft submit printed %q", out)
		}
		return id, r.afterSubmit(ctx, id, 0)
	}
	var resp wire.SubmitResponse
	if _, err := r.rest(ctx, "POST", "/v1/tasks", req, &resp); err != nil {
		if r.retryable(err) {
			return 0, nil
		}
		return 0, err
	}
	return resp.ID, r.afterSubmit(ctx, resp.ID, resp.Superseded)
}

// retryable: an answer the model takes as "not done" (503, a conflict).
func (r *runner) retryable(err error) bool {
	s := err.Error()
	return strings.Contains(s, ": 503 ") || strings.Contains(s, ": 409 ") || strings.Contains(s, ": 500 ")
}

func (r *runner) afterSubmit(ctx context.Context, id, superseded int64) error {
	t, err := r.c.st.GetTask(ctx, id)
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			r.violate(InvEffect, "submit answered task %d, which does not exist", id)
			return nil
		}
		return err
	}
	r.see(seen(t), true)
	if superseded != 0 {
		old, err := r.c.st.GetTask(ctx, superseded)
		if err == nil && !old.State.Terminal() {
			r.violate(InvEffect, "submit with on_conflict=supersede answered superseded=%d, which is still %s", superseded, old.State)
		}
	}
	return nil
}

func (r *runner) cancel(ctx context.Context, op Op) error {
	id, ok := pick(r.open, op.Arg)
	if !ok {
		return nil
	}
	if !r.act(ctx, op, []string{"cancel", strconv.FormatInt(id, 10)}, fmt.Sprintf("/v1/tasks/%d/cancel", id), wire.TaskAction{Reason: "model"}, nil) {
		return nil
	}
	t, err := r.c.st.GetTask(ctx, id)
	if err != nil {
		return nil
	}
	if t.State != state.TaskCancelled {
		r.violate(InvEffect, "cancel of task %d reported success, the task is %s", id, t.State)
	}
	return nil
}

// transitionSince reports whether the audit trail of task id has a
// transition of step (""=the task) from one of from, at or after at.
func (r *runner) transitionSince(ctx context.Context, id int64, step string, at time.Time, from ...string) bool {
	audit, err := r.c.st.Audit(ctx, id)
	if err != nil {
		return true // cannot tell
	}
	for _, e := range audit {
		if e.Step == step && !e.At.Before(at.Add(-time.Second)) {
			for _, f := range from {
				if e.From == f {
					return true
				}
			}
		}
	}
	return false
}

func (r *runner) retryTask(ctx context.Context, op Op) error {
	r.refreshTargets(ctx)
	id, ok := pick(r.failed, op.Arg)
	if !ok {
		return nil
	}
	t0, err := r.c.st.GetTask(ctx, id)
	if err != nil || !t0.State.Terminal() || t0.State == state.TaskCompleted {
		return nil
	}
	at := time.Now()
	if !r.act(ctx, op, []string{"retry", strconv.FormatInt(id, 10)}, fmt.Sprintf("/v1/tasks/%d/retry", id), wire.TaskAction{Reason: "model"}, nil) {
		return nil
	}
	if !r.transitionSince(ctx, id, "", at, string(t0.State)) {
		r.violate(InvEffect, "retry of task %d (%s) reported success, its audit trail shows no transition from %s", id, t0.Workflow, t0.State)
	}
	return nil
}

func (r *runner) stepAction(ctx context.Context, op Op) error {
	r.refreshTargets(ctx)
	sid, ok := pick(r.failedSteps, op.Arg)
	if !ok {
		return nil
	}
	s0, err := r.c.st.GetStep(ctx, sid)
	if err != nil || s0.State != state.StepFailed {
		return nil
	}
	verb := "retry"
	if op.Kind == OpResolveStep {
		verb = "resolve"
	}
	at := time.Now()
	if !r.act(ctx, op, []string{"step", verb, strconv.FormatInt(sid, 10)}, fmt.Sprintf("/v1/steps/%d/%s", sid, verb), wire.StepAction{Reason: "model"}, nil) {
		return nil
	}
	s, err := r.c.st.GetStep(ctx, sid)
	if err != nil {
		return nil
	}
	switch op.Kind {
	case OpResolveStep:
		if s.State != state.StepResolved {
			r.violate(InvEffect, "resolve of step %d (%s of task %d) reported success, the step is %s", sid, s.Name, s.TaskID, s.State)
		}
	default:
		if !r.transitionSince(ctx, s.TaskID, s.Name, at, string(state.StepFailed)) {
			r.violate(InvEffect, "retry of step %d (%s of task %d) reported success, its audit trail shows no transition from failed (it is %s)", sid, s.Name, s.TaskID, s.State)
		}
	}
	return nil
}

func (r *runner) signal(ctx context.Context, op Op) error {
	// Tasks waiting now first; else any signal workflow's task not yet
	// signalled (the signal is kept for the wait to come).
	id, ok := pick(r.waiting, op.Arg)
	if !ok || op.Arg%3 == 0 {
		var cands []int64
		for _, tid := range r.order {
			m := r.tasks[tid]
			if !m.signalled && !m.gone && (m.workflow == "mb/sig" || m.workflow == "mb/sigto" || m.workflow == "mb/fn") {
				cands = append(cands, tid)
			}
		}
		if id, ok = pick(cands, op.Arg/3); !ok {
			return nil
		}
	}
	var res wire.SignalResult
	if !r.act(ctx, op, []string{"signal", strconv.FormatInt(id, 10), "go"}, fmt.Sprintf("/v1/tasks/%d/signals/go", id), wire.SignalRequest{Payload: json.RawMessage(`{"ok": true}`)}, &res) {
		return nil
	}
	if m := r.tasks[id]; m != nil {
		m.signalled = true
	}
	if res.Delivered {
		t, err := r.c.st.GetTask(ctx, id)
		if err == nil {
			for _, s := range t.Steps {
				if s.Kind == store.KindSignal && s.State == state.StepWaiting && s.Name == "w" {
					r.violate(InvEffect, "signal to task %d reported delivered, its step w still waits", id)
				}
			}
		}
	}
	return nil
}

func (r *runner) policies(ctx context.Context) (map[string]wire.Policy, error) {
	var rep wire.PolicyReport
	if _, err := r.rest(ctx, "GET", "/v1/policies", nil, &rep); err != nil {
		return nil, err
	}
	out := map[string]wire.Policy{}
	for _, p := range rep.Policies {
		out[p.Target] = p
	}
	return out, nil
}

func (r *runner) policy(ctx context.Context, op Op) error {
	ns, _ := pick(namespaces, op.Arg)
	if op.Kind == OpPauseUnknown {
		ns = fmt.Sprintf("nosuch%d", op.Arg%100)
	}
	var change wire.PolicyChange
	change.Target = ns
	change.Reason = "model"
	var args []string
	t, f := true, false
	switch op.Kind {
	case OpPause, OpPauseUnknown:
		change.Paused = &t
		args = []string{"pause", ns}
	case OpResume:
		change.Paused = &f
		args = []string{"resume", ns}
	case OpLimit:
		n := int(op.Arg%3) + 1
		change.Concurrency = &n
		args = []string{"limit", ns, "--concurrency", strconv.Itoa(n)}
	case OpUnlimit:
		n := 0
		change.Concurrency = &n
		args = []string{"limit", ns, "--concurrency", "0"}
	}
	ok := r.act(ctx, op, args, "/v1/policies", change, nil)
	if op.Kind == OpPauseUnknown {
		if ok {
			r.violate(InvRefused, "pausing namespace %q, which no workflow has, reported success (via %s)", ns, map[bool]string{true: "CLI", false: "REST"}[viaCLI(op)])
		}
		return nil
	}
	if !ok {
		return nil
	}
	switch op.Kind {
	case OpPause:
		r.paused[ns] = true
	case OpResume:
		delete(r.paused, ns)
	case OpLimit:
		r.limited[ns] = true
	case OpUnlimit:
		delete(r.limited, ns)
	}
	ps, err := r.policies(ctx)
	if err != nil {
		return nil
	}
	p := ps[ns]
	switch {
	case op.Kind == OpPause && !p.Paused:
		r.violate(InvEffect, "pause %s reported success, GET /v1/policies shows it not paused", ns)
	case op.Kind == OpResume && p.Paused:
		r.violate(InvEffect, "resume %s reported success, GET /v1/policies shows it paused", ns)
	case op.Kind == OpLimit && p.Concurrency != *change.Concurrency:
		r.violate(InvEffect, "limit %s --concurrency %d reported success, GET /v1/policies shows %d", ns, *change.Concurrency, p.Concurrency)
	case op.Kind == OpUnlimit && p.Concurrency != 0:
		r.violate(InvEffect, "limit %s --concurrency 0 reported success, GET /v1/policies shows %d", ns, p.Concurrency)
	}
	return nil
}

func (r *runner) delete(ctx context.Context, op Op) error {
	r.refreshTargets(ctx)
	cands := append(append([]int64{}, r.ended...), r.failed...)
	id, ok := pick(cands, op.Arg)
	if !ok {
		return nil
	}
	t, err := r.c.st.GetTask(ctx, id)
	if err != nil || !t.State.Terminal() || t.ParentTaskID != 0 {
		return nil
	}
	var res wire.BulkResult
	if !r.act(ctx, op, []string{"delete", strconv.FormatInt(id, 10)}, "/v1/tasks/delete", wire.BulkRequest{IDs: []int64{id}, Reason: "model"}, &res) ||
		!viaCLI(op) && res.Done != 1 {
		return nil
	}
	r.gone(id)
	if _, err := r.c.st.GetTask(ctx, id); !errors.Is(err, store.ErrNotFound) {
		r.violate(InvEffect, "delete of task %d reported success, the task is still there (%v)", id, err)
	}
	return nil
}

func (r *runner) gone(id int64) {
	if m := r.tasks[id]; m != nil {
		m.gone = true
	}
	r.ended = remove(r.ended, id)
	r.failed = remove(r.failed, id)
}

func remove(xs []int64, id int64) []int64 {
	out := xs[:0]
	for _, x := range xs {
		if x != id {
			out = append(out, x)
		}
	}
	return out
}

func (r *runner) prune(ctx context.Context, op Op) error {
	st := []string{"completed", "failed", "cancelled"}[op.Arg%3]
	// Which of the model's tasks prune may take, and which it may not.
	var res wire.BulkResult
	at := time.Now()
	if _, err := r.rest(ctx, "POST", "/v1/tasks/prune", wire.PruneRequest{State: st, OlderThan: "1s"}, &res); err != nil {
		return nil
	}
	vanished := 0
	for _, id := range r.order {
		m := r.tasks[id]
		if m.gone {
			continue
		}
		t, err := r.c.st.GetTask(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			vanished++
			r.gone(id)
			continue
		}
		if err == nil && string(t.State) == st && t.FinishedAt != nil && t.FinishedAt.Before(at.Add(-2*time.Second)) && t.ParentTaskID == 0 {
			r.violate(InvEffect, "prune --state %s --older-than 1s reported %d pruned, and task %d (%s, finished %s ago) is still there", st, res.Done, id, t.State, at.Sub(*t.FinishedAt).Round(time.Millisecond))
		}
	}
	if vanished > res.Done {
		r.violate(InvEffect, "prune --state %s reported %d pruned, %d of the model's tasks vanished", st, res.Done, vanished)
	}
	return nil
}

func (r *runner) schedule(ctx context.Context, op Op) error {
	verb := []string{"pause", "resume"}[op.Arg%2]
	var rec wire.Schedule
	if _, err := r.rest(ctx, "POST", "/v1/schedules/mb/tick/every/"+verb, wire.TaskAction{Reason: "model"}, &rec); err != nil {
		return nil
	}
	var got wire.Schedule
	if _, err := r.rest(ctx, "GET", "/v1/schedules/mb/tick/every", nil, &got); err == nil && got.Paused != (verb == "pause") {
		r.violate(InvEffect, "schedule %s reported success, GET shows paused=%v", verb, got.Paused)
	}
	return nil
}

// stopEngine: a graceful stop (SIGTERM) of a `weft worker`, preferably one
// running a long step (one is submitted and awaited when none runs); the
// driver restarts it once it has drained and exited.
func (r *runner) stopEngine(ctx context.Context, op Op) error {
	live := r.c.liveWorkers()
	if len(live) == 0 {
		return nil
	}
	victim, _ := pick(live, op.Arg)
	if len(live) > 1 {
		p, err := r.longHolder(ctx, op, live)
		if err != nil {
			return err
		}
		if p != nil {
			victim = p
			time.Sleep(200 * time.Millisecond) // its handler started
		}
	}
	r.cfg.logf("op %d: SIGTERM %s (pid %d)", r.cur, victim.Name, victim.PID())
	victim.stopping = true
	return victim.Signal(syscall.SIGTERM)
}

// longHolder submits long tasks (up to three) and waits (bounded) until
// a worker among live holds one of their steps, and returns it (nil: none
// did in time). weft serve's engine may take one: then one more.
func (r *runner) longHolder(ctx context.Context, op Op, live []*proc) (*proc, error) {
	deadline := time.Now().Add(2*r.c.lease + 2*time.Second)
	var longs []int64
	for time.Now().Before(deadline) {
		if len(longs) < 3 {
			id, err := r.submit(ctx, Op{Kind: OpSubmitLong, Arg: op.Arg})
			if err != nil {
				return nil, err
			}
			longs = append(longs, id)
		}
		for range 10 {
			for _, id := range longs {
				if p := r.holder(ctx, id, live); p != nil {
					return p, nil
				}
			}
			time.Sleep(30 * time.Millisecond)
		}
	}
	return nil, nil
}

// holder returns the worker among live that holds a running step of task id.
func (r *runner) holder(ctx context.Context, id int64, live []*proc) *proc {
	t, err := r.c.st.GetTask(ctx, id)
	if err != nil {
		return nil
	}
	es, err := r.c.st.ListEngines(ctx)
	if err != nil {
		return nil
	}
	pids := map[string]int{} // engine id -> its process
	for _, e := range es {
		pids[e.ID] = e.PID
	}
	for _, s := range t.Steps {
		if s.State != state.StepRunning {
			continue
		}
		if pid, ok := pids[s.EngineID]; ok {
			for _, p := range live {
				if p.PID() == pid {
					return p
				}
			}
		}
	}
	return nil
}

func (r *runner) killEngine(ctx context.Context, op Op) error {
	live := r.c.liveWorkers()
	victim, ok := pick(live, op.Arg)
	if !ok {
		return nil
	}
	r.cfg.logf("op %d: SIGKILL %s (pid %d)", r.cur, victim.Name, victim.PID())
	victim.Kill()
	return victim.start(r.c.bin)
}
