package store

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/state"
)

// Kinds of steps (StepInsert.Kind, Step.Kind). A plain step has kind "".
const (
	// KindDecision: the step's outcome names which of its direct children
	// run (Outcome.Decide, Outcome.Branches); the others are skipped.
	KindDecision = "decision"
	// KindBatch: the step's outcome creates one item step per batch
	// (Outcome.Spawn); its children wait for every item.
	KindBatch = "batch"
	// KindItem: one item of a batch, created by the store.
	KindItem = "item"
	// KindSignal: the step runs no code. An engine claims it like any
	// step, with SignalHandler, and its outcome (Outcome.BeginWait) begins
	// the wait: the step then waits, holding no slot, until a signal of
	// its name arrives (completed, the payload as its result) or its
	// timeout passes (failed).
	KindSignal = "signal"
	// KindFunction: the one step of a durable function's task, which runs
	// the function; each call the function makes becomes a step of the
	// task (Outcome.Calls) that the function step waits for.
	KindFunction = "function"
	// KindCall: a call of a durable function (a step of code or a durable
	// sleep), run by the function's handler; Item describes it.
	KindCall = "call"
)

// SignalHandler is the engine's built-in handler of KindSignal steps,
// which begins their wait. The store gives it to every signal step.
const SignalHandler = "weft.signal"

// TaskInsert is one task to submit.
type TaskInsert struct {
	Namespace      string
	Workflow       string
	Version        string
	Input          json.RawMessage // JSON; nil means {}
	Priority       int
	RunAt          time.Time // zero: now
	GoodUntil      time.Time // zero: none
	IdempotencyKey string    // "": none
	// Supersede: when the key exists in the namespace, the task holding it
	// gives it up (and is cancelled if it has not finished, its audit
	// naming the new task) and this task is inserted with it.
	Supersede bool
	// Tags label the task (see ValidateTags); ListTasks and the bulk
	// actions filter by them.
	Tags  map[string]string
	Steps []StepInsert
	// LimitKey and Limit bound how many tasks of the namespace with the
	// same key run at once (a workflow's concurrency limit): a step of a
	// task that has not started is claimed only while fewer than Limit
	// tasks with LimitKey run in the namespace. "" means no limit.
	LimitKey string
	Limit    int
	// TraceParent is the W3C traceparent the task's steps continue, and
	// TraceState its tracestate; "": none.
	TraceParent string
	TraceState  string
}

// StepInsert is one step of a task to submit, in definition order.
type StepInsert struct {
	Name        string
	Handler     string
	Deps        []int // indexes into TaskInsert.Steps
	Priority    int   // added to the task's priority
	MaxAttempts int
	TTL         time.Duration
	// Timeout bounds one attempt: a claim sets the step's deadline to the
	// claim time plus Timeout, and OverdueSteps reports it once the
	// deadline passes, wherever the step runs. 0: none.
	Timeout time.Duration
	// Kind is "" or one of KindDecision, KindBatch, KindSignal,
	// KindWorkflow.
	Kind string
	// TriggerRule decides, from its dependencies' outcomes, whether the
	// step runs (see dag.Rule); "" means all_success.
	TriggerRule string
	// Signal names the signal a KindSignal step waits for, and
	// SignalTimeout how long it waits once its dependencies allow (0:
	// forever).
	Signal        string
	SignalTimeout time.Duration
	// Preemptible lets an engine stop the step for a ready step of higher
	// priority: it returns to ready with its checkpoint, without using an
	// attempt.
	Preemptible bool
	// LimitKey and Limit bound how many steps of the task's namespace with
	// the same key run at once, across every engine (a step's concurrency
	// limit). "" means no limit.
	LimitKey string
	Limit    int
	// RateKey and Rate bound how often steps with the same key are
	// claimed, across every engine (a step's rate limit). "" means none.
	RateKey string
	Rate    Rate
	// Breaker is the step's circuit breaker (see Breakers); nil: none.
	Breaker *BreakerSpec
	// Item and RunAt are a call's (Outcome.Calls): what the call is, for
	// the function's handler, and when a durable sleep ends (zero: the
	// call is ready at once).
	Item  json.RawMessage
	RunAt time.Time
}

// InsertResult is the outcome of one TaskInsert.
type InsertResult struct {
	Task      Task
	Duplicate bool
	// Superseded is the task that held the key before a Supersede insert
	// (0: none).
	Superseded int64
}

// Task is a stored task. Steps is filled by GetTask only.
type Task struct {
	ID             int64
	Namespace      string
	Workflow       string
	Version        string
	State          state.Task
	Input          json.RawMessage
	Priority       int
	IdempotencyKey string
	RunAt          time.Time
	GoodUntil      *time.Time
	CreatedAt      time.Time
	StartedAt      *time.Time
	FinishedAt     *time.Time
	Error          string
	// Schedule names the schedule that submitted the task (its name within
	// the workflow) and ScheduleTick the tick it was submitted for.
	Schedule     string
	ScheduleTick *time.Time
	// ParentTaskID and ParentStep name the task and step that started this
	// task as a child (0 and "" for a root task), and Depth counts the
	// tasks above it. Children lists the tasks it started, oldest first
	// (filled by GetTask only).
	ParentTaskID int64
	ParentStep   string
	Depth        int
	Children     []int64
	// Tags are the labels the task was submitted with.
	Tags map[string]string
	// TraceParent and TraceState are the W3C trace context stored with the
	// task, which its steps continue ("": none).
	TraceParent, TraceState string
	// Attention says why the task needs a person (ListTasks with
	// TaskFilter.Attention only).
	Attention []string
	// Active lists the task's ready, running and waiting steps, in order
	// (ListTasks with TaskFilter.Active only).
	Active []Step
	Steps  []Step
}

// Step is a stored step of a task.
type Step struct {
	ID          int64
	TaskID      int64
	Index       int
	Name        string
	Handler     string
	Namespace   string
	State       state.Step
	Sub         string // "deferred" while running
	DependsOn   []string
	Attempts    int
	MaxAttempts int
	Priority    int
	Result      json.RawMessage
	Error       string
	Checkpoint  json.RawMessage
	// Kind is "" or one of the Kind constants.
	Kind string
	// Template names the step template an item of a batch runs, and Item
	// is its batch item.
	Template string
	Item     json.RawMessage
	// Signal is the signal a KindSignal step waits for.
	Signal string
	// Progress is the fraction (0 to 1) the handler last reported, with
	// its message.
	Progress        *float64
	ProgressMessage string
	RunAt           *time.Time
	EngineID        string
	StartedAt       *time.Time
	// Deadline is when the running attempt times out: its claim time plus
	// the step's timeout. Nil when the step has no timeout or is not
	// running.
	Deadline   *time.Time
	FinishedAt *time.Time
	// ChildTaskID is the child task a KindWorkflow step started last (0:
	// none), and ChildError why that child did not complete while the
	// step waits to report it.
	ChildTaskID int64
	ChildError  string
	// Preemptible: an engine may stop the step for a ready step of higher
	// priority (workflow.Step.Preemptible).
	Preemptible bool
}
