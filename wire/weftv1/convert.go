// Package weftv1 holds weft's gRPC API (proto/weft/v1): the messages
// generated from the .proto files, the Connect and gRPC stubs in
// weftv1connect, and, in this file, the conversions between the messages
// and the JSON API's types of package wire. The server converts a request
// to its wire type and validates it with the same code as the REST route;
// the Go client converts back. Generated files are checked against the
// .proto files by TestGeneratedCodeIsCurrent.
package weftv1

import (
	"encoding/json"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/wire"
)

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func tsp(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// timePtr is a message's time, nil when unset.
func timePtr(t *timestamppb.Timestamp) *time.Time {
	if t == nil {
		return nil
	}
	v := t.AsTime()
	return &v
}

func timeOf(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}

// raw is a bytes field holding JSON as a json.RawMessage, nil when empty.
func raw(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	return json.RawMessage(b)
}

// Wire is the submission as POST /v1/tasks takes it.
func (x *SubmitRequest) Wire() wire.SubmitRequest {
	return wire.SubmitRequest{Workflow: x.GetWorkflow(), Input: raw(x.GetInput()), IdempotencyKey: x.GetIdempotencyKey(), Priority: int(x.GetPriority()),
		RunAt: timePtr(x.GetRunAt()), GoodUntil: timePtr(x.GetGoodUntil()), OnConflict: x.GetOnConflict(), Tags: x.GetTags()}
}

// SubmitRequestOf is a submission as a message.
func SubmitRequestOf(r wire.SubmitRequest) *SubmitRequest {
	return &SubmitRequest{Workflow: r.Workflow, Input: r.Input, IdempotencyKey: r.IdempotencyKey, Priority: int32(r.Priority), RunAt: tsp(r.RunAt),
		GoodUntil: tsp(r.GoodUntil), OnConflict: r.OnConflict, Tags: r.Tags}
}

// SubmitResponseOf is a submission's answer as a message.
func SubmitResponseOf(r wire.SubmitResponse) *SubmitResponse {
	return &SubmitResponse{Task: TaskOf(r.Task), Duplicate: r.Duplicate, Superseded: r.Superseded}
}

// Wire is the answer as POST /v1/tasks gives it.
func (x *SubmitResponse) Wire() wire.SubmitResponse {
	return wire.SubmitResponse{Task: x.GetTask().Wire(), Duplicate: x.GetDuplicate(), Superseded: x.GetSuperseded()}
}

// TaskOf is a task as a message.
func TaskOf(t wire.Task) *Task {
	return &Task{Id: t.ID, Namespace: t.Namespace, Workflow: t.Workflow, Version: t.Version, State: string(t.State), Input: t.Input,
		Priority: int32(t.Priority), IdempotencyKey: t.IdempotencyKey, RunAt: ts(t.RunAt), GoodUntil: tsp(t.GoodUntil), CreatedAt: ts(t.CreatedAt),
		StartedAt: tsp(t.StartedAt), FinishedAt: tsp(t.FinishedAt), Error: t.Error, Schedule: t.Schedule, ParentTaskId: t.ParentTaskID,
		ParentStep: t.ParentStep, Children: t.Children, Tags: t.Tags, Attention: t.Attention, Active: steps(t.Active), Steps: steps(t.Steps)}
}

// Wire is the task as the JSON API gives it (the fields the message has).
func (x *Task) Wire() wire.Task {
	if x == nil {
		return wire.Task{}
	}
	t := wire.Task{ID: x.GetId(), Namespace: x.GetNamespace(), Workflow: x.GetWorkflow(), Version: x.GetVersion(), State: state.Task(x.GetState()),
		Input: raw(x.GetInput()), Priority: int(x.GetPriority()), IdempotencyKey: x.GetIdempotencyKey(), RunAt: timeOf(x.GetRunAt()),
		GoodUntil: timePtr(x.GetGoodUntil()), CreatedAt: timeOf(x.GetCreatedAt()), StartedAt: timePtr(x.GetStartedAt()),
		FinishedAt: timePtr(x.GetFinishedAt()), Error: x.GetError(), Schedule: x.GetSchedule(), ParentTaskID: x.GetParentTaskId(),
		ParentStep: x.GetParentStep(), Children: x.GetChildren(), Tags: x.GetTags(), Attention: x.GetAttention()}
	for _, s := range x.GetActive() {
		t.Active = append(t.Active, s.Wire())
	}
	for _, s := range x.GetSteps() {
		t.Steps = append(t.Steps, s.Wire())
	}
	return t
}

func steps(ss []wire.Step) []*Step {
	if len(ss) == 0 {
		return nil
	}
	out := make([]*Step, len(ss))
	for i, s := range ss {
		out[i] = StepOf(s)
	}
	return out
}

// StepOf is a step as a message.
func StepOf(s wire.Step) *Step {
	return &Step{Id: s.ID, TaskId: s.TaskID, Name: s.Name, Handler: s.Handler, Namespace: s.Namespace, State: string(s.State), SubStatus: s.Sub,
		DependsOn: s.DependsOn, Attempts: int32(s.Attempts), MaxAttempts: int32(s.MaxAttempts), Result: s.Result, Error: s.Error,
		StartedAt: tsp(s.StartedAt), FinishedAt: tsp(s.FinishedAt)}
}

// Wire is the step as the JSON API gives it (the fields the message has).
func (x *Step) Wire() wire.Step {
	return wire.Step{ID: x.GetId(), TaskID: x.GetTaskId(), Name: x.GetName(), Handler: x.GetHandler(), Namespace: x.GetNamespace(),
		State: state.Step(x.GetState()), Sub: x.GetSubStatus(), DependsOn: x.GetDependsOn(), Attempts: int(x.GetAttempts()),
		MaxAttempts: int(x.GetMaxAttempts()), Result: raw(x.GetResult()), Error: x.GetError(), StartedAt: timePtr(x.GetStartedAt()),
		FinishedAt: timePtr(x.GetFinishedAt())}
}

// EventOf is an event as a message.
func EventOf(e wire.Event) *Event {
	return &Event{Cursor: e.Cursor, Type: e.Type, Namespace: e.Namespace, Workflow: e.Workflow, TaskId: e.TaskID, Step: e.Step, From: e.From,
		To: e.To, At: ts(e.At), Attempt: int32(e.Attempt), EngineId: e.EngineID, Reason: e.Reason}
}

// Wire is the event as GET /v1/events gives it (the audit entry's id
// aside).
func (x *Event) Wire() wire.Event {
	return wire.Event{Cursor: x.GetCursor(), Type: x.GetType(), Namespace: x.GetNamespace(), Workflow: x.GetWorkflow(),
		AuditEntry: wire.AuditEntry{TaskID: x.GetTaskId(), Step: x.GetStep(), From: x.GetFrom(), To: x.GetTo(), At: timeOf(x.GetAt()),
			Attempt: int(x.GetAttempt()), EngineID: x.GetEngineId(), Reason: x.GetReason()}}
}

// Wire is the registration as POST /v1/workers takes it.
func (x *RegisterRequest) Wire() wire.RegisterWorker {
	return wire.RegisterWorker{Name: x.GetName(), Namespaces: x.GetNamespaces(), Handlers: x.GetHandlers()}
}

// RegisterResponseOf is a registration's answer as a message.
func RegisterResponseOf(r wire.WorkerRegistered) *RegisterResponse {
	return &RegisterResponse{WorkerId: r.WorkerID, Namespaces: r.Namespaces, Handlers: r.Handlers, LeaseTtlMs: r.LeaseTTLMS,
		HeartbeatIntervalMs: r.HeartbeatIntervalMS}
}

// FenceOf is a fence as a message.
func FenceOf(f wire.Fence) *Fence {
	return &Fence{StepId: f.StepID, Attempt: int32(f.Attempt), LeaseId: f.LeaseID}
}

// Wire is the fence as the worker protocol carries it; nil stays nil, for
// the server to refuse as missing.
func (x *Fence) Wire() *wire.Fence {
	if x == nil {
		return nil
	}
	return &wire.Fence{StepID: x.GetStepId(), Attempt: int(x.GetAttempt()), LeaseID: x.GetLeaseId()}
}

// ClaimedStepOf is a claimed step as a message.
func ClaimedStepOf(c wire.ClaimedStep) *ClaimedStep {
	deps := make(map[string][]byte, len(c.Deps))
	for k, v := range c.Deps {
		deps[k] = v
	}
	out := &ClaimedStep{StepId: c.StepID, TaskId: c.TaskID, Namespace: c.Namespace, Workflow: c.Workflow, Version: c.Version, Step: c.Step,
		Handler: c.Handler, Attempt: int32(c.Attempt), Input: c.Input, Deps: deps, Config: c.Config, Checkpoint: c.Checkpoint, Batch: c.Batch,
		TimeoutMs: c.TimeoutMS, Deadline: tsp(c.Deadline), Fence: FenceOf(c.Fence), Traceparent: c.TraceParent, Tracestate: c.TraceState, Kind: c.Kind}
	for _, r := range c.Calls {
		out.Calls = append(out.Calls, &RecordedCall{Name: r.Name, Kind: r.Kind, Ended: r.Ended, Ok: r.OK, Result: r.Result, Error: r.Error})
	}
	return out
}

// Wire is the claimed step as the REST claim gives it.
func (x *ClaimedStep) Wire() wire.ClaimedStep {
	deps := make(map[string]json.RawMessage, len(x.GetDeps()))
	for k, v := range x.GetDeps() {
		deps[k] = v
	}
	c := wire.ClaimedStep{StepID: x.GetStepId(), TaskID: x.GetTaskId(), Namespace: x.GetNamespace(), Workflow: x.GetWorkflow(),
		Version: x.GetVersion(), Step: x.GetStep(), Handler: x.GetHandler(), Attempt: int(x.GetAttempt()), Input: raw(x.GetInput()), Deps: deps,
		Config: raw(x.GetConfig()), Checkpoint: raw(x.GetCheckpoint()), Batch: raw(x.GetBatch()), TimeoutMS: x.GetTimeoutMs(),
		Deadline: timePtr(x.GetDeadline()), TraceParent: x.GetTraceparent(), TraceState: x.GetTracestate(), Kind: x.GetKind()}
	if f := x.GetFence().Wire(); f != nil {
		c.Fence = *f
	}
	for _, r := range x.GetCalls() {
		c.Calls = append(c.Calls, wire.RecordedCall{Name: r.GetName(), Kind: r.GetKind(), Ended: r.GetEnded(), OK: r.GetOk(), Result: raw(r.GetResult()), Error: r.GetError()})
	}
	return c
}

// Wire is the heartbeat as POST /v1/workers/{id}/heartbeat takes it.
func (x *HeartbeatRequest) Wire() wire.Heartbeat {
	h := wire.Heartbeat{Steps: make([]wire.Fence, 0, len(x.GetSteps())), Handlers: x.GetHandlers(), Namespaces: x.GetNamespaces()}
	for _, f := range x.GetSteps() {
		if w := f.Wire(); w != nil {
			h.Steps = append(h.Steps, *w)
		} else {
			h.Steps = append(h.Steps, wire.Fence{})
		}
	}
	if x.Free != nil {
		free := int(x.GetFree())
		h.Free = &free
	}
	return h
}

// HeartbeatResponseOf is a heartbeat's answer as a message.
func HeartbeatResponseOf(r wire.HeartbeatResponse) *HeartbeatResponse {
	out := &HeartbeatResponse{}
	for _, f := range r.Lost {
		out.Lost = append(out.Lost, FenceOf(f))
	}
	for _, p := range r.Preempt {
		out.Preempt = append(out.Preempt, &Preempt{Fence: FenceOf(p.Fence), Reason: p.Reason})
	}
	return out
}

// ReportedOf is the answer to a complete or a fail as a message.
func ReportedOf(r wire.Reported) *Reported {
	return &Reported{State: r.State, RetryAt: tsp(r.RetryAt), Error: r.Error}
}

// Wire is the complete as POST /v1/workers/{id}/complete takes it.
func (x *CompleteRequest) Wire() wire.Complete {
	return wire.Complete{Fence: x.GetFence().Wire(), Result: raw(x.GetResult())}
}

// Wire is the fail as POST /v1/workers/{id}/fail takes it.
func (x *FailRequest) Wire() wire.Fail {
	return wire.Fail{Fence: x.GetFence().Wire(), Error: x.GetError(), Permanent: x.GetPermanent(), RetryAfterMS: x.GetRetryAfterMs(),
		Preempted: x.GetPreempted(), SnoozeMS: x.GetSnoozeMs()}
}

// Wire is the calls as POST /v1/workers/{id}/calls takes them.
func (x *CallsRequest) Wire() wire.Calls {
	out := wire.Calls{Fence: x.GetFence().Wire(), Calls: make([]wire.Call, len(x.GetCalls()))}
	for i, c := range x.GetCalls() {
		out.Calls[i] = wire.Call{Name: c.GetName(), Kind: c.GetKind(), SleepMS: c.GetSleepMs(), Signal: c.GetSignal(), TimeoutMS: c.GetTimeoutMs(),
			MaxAttempts: int(c.GetMaxAttempts()), Priority: int(c.GetPriority()), Workflow: c.GetWorkflow(), Input: raw(c.GetInput())}
	}
	return out
}

// Wire is the checkpoint as POST /v1/workers/{id}/checkpoint takes it.
func (x *CheckpointRequest) Wire() wire.Checkpoint {
	return wire.Checkpoint{Fence: x.GetFence().Wire(), Checkpoint: raw(x.GetCheckpoint())}
}

// Wire is the progress as POST /v1/workers/{id}/progress takes it.
func (x *ProgressRequest) Wire() wire.Progress {
	p := wire.Progress{Fence: x.GetFence().Wire(), Message: x.GetMessage()}
	if x.Fraction != nil {
		f := x.GetFraction()
		p.Fraction = &f
	}
	return p
}
