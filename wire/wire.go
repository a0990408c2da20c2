// Package wire holds the JSON types of weft's REST API and of its
// remote-worker protocol: the bodies of requests and responses and the
// error codes. The server (package server) and the Go client (package
// client) both use these types, so the two cannot drift; the OpenAPI
// document (server/openapi.json) describes the same shapes. The records
// the API sends (tasks, steps, events, webhooks, schedules, policies…) are
// wire's own types, made from the storage records by the Of functions of
// records.go: storage records carry no JSON tags, so a change to the
// storage is not a change to the API.
//
// The package depends on no database driver and no engine code: a program
// that only talks to a weft server builds with CGO_ENABLED=0.
package wire

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/internal/duration"
)

// SignatureHeader signs a webhook delivery: "t=<unix seconds>,v1=<hex
// HMAC-SHA256 of "<t>.<body>" keyed with the webhook's secret>".
const SignatureHeader = "Weft-Signature"

// CreateWebhook is the body of POST /v1/webhooks.
type CreateWebhook struct {
	URL       string   `json:"url"`
	Namespace string   `json:"namespace,omitempty"`
	Workflow  string   `json:"workflow,omitempty"`
	Types     []string `json:"types,omitempty"`
}

// WebhookList is the body of GET /v1/webhooks.
type WebhookList struct {
	Webhooks []Webhook `json:"webhooks"`
}

// Error codes of the API. They are stable: clients branch on them.
const (
	CodeInvalidJSON      = "invalid_json"       // the body is not JSON, or trails data
	CodeUnknownField     = "unknown_field"      // the body has a field the endpoint does not take
	CodeInvalidField     = "invalid_field"      // a field (or query parameter) has a wrong type or value
	CodeBodyTooLarge     = "body_too_large"     // the body exceeds the size limit
	CodeUnauthenticated  = "unauthenticated"    // no credentials, or credentials not accepted
	CodeForbidden        = "forbidden"          // authenticated, but the permission is missing
	CodeNotFound         = "not_found"          // no such task, step, workflow, worker or route
	CodeConflict         = "conflict"           // the change does not fit the current state
	CodeStaleLease       = "stale_lease"        // the fencing token no longer holds the step
	CodeWorkerLost       = "worker_lost"        // the worker is unknown or was declared dead: register again
	CodeOverloaded       = "overloaded"         // the backlog is full: retry after Retry-After
	CodeTimeout          = "timeout"            // the request took longer than the server allows
	CodeUnavailable      = "unavailable"        // the database is unreachable for now: retry after Retry-After
	CodeInternal         = "internal"           // anything else; details are in the server's log
	CodeInvalidWorkflow  = "invalid_workflow"   // a template failed validation
	CodeMethodNotAllowed = "method_not_allowed" // the route exists for other methods
)

// Readiness is the body of /health/live and /health/ready: "ok" or
// "unavailable", with each check ("database", "engine", a failing loop)
// and its state.
type Readiness struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Error is an error of the API: a stable code, a message, and the field at
// fault or a template's problems when there are.
type Error struct {
	Code     string    `json:"code"`
	Message  string    `json:"message"`
	Field    string    `json:"field,omitempty"`
	Problems []Problem `json:"problems,omitempty"`
}

// Problem is one problem of a template, with its place.
type Problem struct {
	Line    int    `json:"line,omitempty"`
	Step    string `json:"step,omitempty"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// SubmitRequest is the body of POST /v1/tasks.
type SubmitRequest struct {
	// Workflow is namespace/name or namespace/name@version.
	Workflow       string          `json:"workflow"`
	Input          json.RawMessage `json:"input,omitempty"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	Priority       int             `json:"priority,omitempty"`
	RunAt          *time.Time      `json:"run_at,omitempty"`
	GoodUntil      *time.Time      `json:"good_until,omitempty"`
	// OnConflict is "return" or "supersede" (see workflow.OnConflict); ""
	// means the workflow's own setting.
	OnConflict string `json:"on_conflict,omitempty"`
	// Tags label the task: lists and bulk actions filter by them.
	Tags map[string]string `json:"tags,omitempty"`
}

// SubmitResponse is the body of POST /v1/tasks: the task and, for a
// supersede submission that took the key from another task, that task.
type SubmitResponse struct {
	Task
	// Duplicate: a task with the idempotency key existed, and this is it.
	Duplicate  bool  `json:"duplicate,omitempty"`
	Superseded int64 `json:"superseded,omitempty"`
}

// SubmitBatch is the body of POST /v1/tasks/batch: up to MaxBatch tasks
// submitted in one transaction, all of them or none.
type SubmitBatch struct {
	Tasks []SubmitRequest `json:"tasks"`
}

// SubmittedBatch is the answer of POST /v1/tasks/batch: each task in the
// order of the request.
type SubmittedBatch struct {
	Tasks []SubmitResponse `json:"tasks"`
}

// MaxBatch is the most tasks POST /v1/tasks/batch takes at once.
const MaxBatch = 1000

// TaskList is the body of GET /v1/tasks: one page, newest first.
type TaskList struct {
	Tasks []Task `json:"tasks"`
	// NextCursor, when set, is the cursor of the next page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// AuditList is the body of GET /v1/tasks/{id}/audit.
type AuditList struct {
	Audit []AuditEntry `json:"audit"`
}

// TaskAction is the optional body of POST /v1/tasks/{id}/cancel and
// /retry: why, recorded in the audit trail with the acting credential.
type TaskAction struct {
	Reason string `json:"reason,omitempty"`
}

// StepAction is the optional body of POST /v1/steps/{id}/retry and
// /resolve.
type StepAction struct {
	Reason string `json:"reason,omitempty"`
}

// SignalRequest is the optional body of POST /v1/tasks/{id}/signals/{name}.
type SignalRequest struct {
	// Payload is any JSON value; absent means null.
	Payload json.RawMessage `json:"payload,omitempty"`
}

// SignalResult says what became of a signal.
type SignalResult struct {
	// Delivered is true when a waiting step took the signal at once, false
	// when it is kept for the next step that begins to wait for it.
	Delivered bool `json:"delivered"`
}

// CompleteStep is the body of POST /v1/steps/{id}/complete: an operator
// ends a step by hand with the result its dependents will see.
type CompleteStep struct {
	Result json.RawMessage `json:"result"`
	Reason string          `json:"reason,omitempty"`
}

// TemplateRequest carries a YAML workflow template (POST /v1/workflows and
// /v1/workflows/validate).
type TemplateRequest struct {
	// Template is the YAML text.
	Template string `json:"template"`
	// Filename names the template in problems; default "template.yaml".
	Filename string `json:"filename,omitempty"`
}

// Workflow is a registered workflow version.
type Workflow struct {
	Namespace  string          `json:"namespace"`
	Name       string          `json:"name"`
	Version    string          `json:"version"`
	Ref        string          `json:"ref"`
	Definition json.RawMessage `json:"definition,omitempty"`
	CreatedAt  string          `json:"created_at,omitempty"`
}

// WorkflowList is the body of GET /v1/workflows.
type WorkflowList struct {
	Workflows []Workflow `json:"workflows"`
}

// Validation is the body of POST /v1/workflows/validate.
type Validation struct {
	Valid    bool      `json:"valid"`
	Workflow string    `json:"workflow,omitempty"`
	Steps    int       `json:"steps,omitempty"`
	Problems []Problem `json:"problems,omitempty"`
}

// The remote-worker protocol (docs/remote-workers.md).

// RegisterWorker is the body of POST /v1/workers.
type RegisterWorker struct {
	Name       string   `json:"name"`
	Namespaces []string `json:"namespaces,omitempty"`
	Handlers   []string `json:"handlers"`
}

// WorkerRegistered answers POST /v1/workers.
type WorkerRegistered struct {
	WorkerID            string   `json:"worker_id"`
	Namespaces          []string `json:"namespaces"`
	Handlers            []string `json:"handlers"`
	LeaseTTLMS          int64    `json:"lease_ttl_ms"`
	HeartbeatIntervalMS int64    `json:"heartbeat_interval_ms"`
	MaxWaitMS           int64    `json:"max_wait_ms"`
}

// Fence is the fencing token of a claim: the attempt and lease a worker
// holds a step under. Every report about the step carries it back.
type Fence struct {
	StepID  int64 `json:"step_id"`
	Attempt int   `json:"attempt"`
	LeaseID int64 `json:"lease_id,string"`
}

// ClaimRequest is the body of POST /v1/workers/{id}/claim.
type ClaimRequest struct {
	Handlers   []string `json:"handlers"`
	Namespaces []string `json:"namespaces,omitempty"`
	Max        int      `json:"max,omitempty"`
	WaitMS     int64    `json:"wait_ms,omitempty"`
}

// ClaimResponse answers a claim: the steps the worker now holds (none when
// nothing was ready within the wait).
type ClaimResponse struct {
	Steps []ClaimedStep `json:"steps"`
}

// ClaimedStep is one step a worker claimed, with what its handler sees.
type ClaimedStep struct {
	StepID     int64                      `json:"step_id"`
	TaskID     int64                      `json:"task_id"`
	Namespace  string                     `json:"namespace"`
	Workflow   string                     `json:"workflow"`
	Version    string                     `json:"version"`
	Step       string                     `json:"step"`
	Handler    string                     `json:"handler"`
	Attempt    int                        `json:"attempt"`
	Input      json.RawMessage            `json:"input"`
	Deps       map[string]json.RawMessage `json:"deps"`
	Config     json.RawMessage            `json:"config,omitempty"`
	Checkpoint json.RawMessage            `json:"checkpoint,omitempty"`
	Batch      json.RawMessage            `json:"batch,omitempty"`
	// TimeoutMS bounds the attempt (absent: none); Deadline is when it
	// passes. The worker should stop then: the server fails the step under
	// its retry policy soon after if it has not heard.
	TimeoutMS int64      `json:"timeout_ms,omitempty"`
	Deadline  *time.Time `json:"deadline,omitempty"`
	Fence     Fence      `json:"fence"`
	// TraceParent is the W3C traceparent of the step's attempt span in the
	// task's trace (of the task's trace alone when the server does not
	// trace; absent: none): a worker that traces makes its spans children
	// of it, with TraceState, the submitter's tracestate (absent: none).
	TraceParent string `json:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty"`
	// Kind is "function" for the step of a durable function's task that
	// runs the function, "call" for a step call of one (whose code the
	// worker reaches by running the function up to the call named Step);
	// absent for other steps. Calls, for both, are the calls the task
	// recorded, in the order the function made them.
	Kind  string         `json:"kind,omitempty"`
	Calls []RecordedCall `json:"calls,omitempty"`
}

// RecordedCall is one call of a durable function that its task recorded:
// a step of the task.
type RecordedCall struct {
	Name string `json:"name"`
	// Kind is step, sleep, signal or child.
	Kind string `json:"kind"`
	// Ended: the call's step ended, with OK and Result (a signal's
	// payload, under "payload", for a signal), or Error.
	Ended  bool            `json:"ended"`
	OK     bool            `json:"ok"`
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// Call is one new call a durable function made.
type Call struct {
	// Name is the call's step name, unique in its task: a name used
	// again takes a count ("charge[2]").
	Name string `json:"name"`
	// Kind is step, sleep, signal or child.
	Kind string `json:"kind"`
	// SleepMS is how long a sleep lasts.
	SleepMS int64 `json:"sleep_ms,omitempty"`
	// Signal is the signal a signal call waits for; TimeoutMS bounds the
	// wait (absent: forever), or, for a step, each attempt.
	Signal    string `json:"signal,omitempty"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// MaxAttempts (default 3) and Priority are a step's.
	MaxAttempts int `json:"max_attempts,omitempty"`
	Priority    int `json:"priority,omitempty"`
	// Workflow ("namespace/name[@version]") and Input are a child's.
	Workflow string          `json:"workflow,omitempty"`
	Input    json.RawMessage `json:"input,omitempty"`
}

// Calls is the body of POST /v1/workers/{id}/calls: the run of a function
// step (Kind "function") made new calls. The step waits for them, holding
// no slot, and is claimed again once they have all ended.
type Calls struct {
	Fence *Fence `json:"fence"`
	Calls []Call `json:"calls"`
}

// Heartbeat is the body of POST /v1/workers/{id}/heartbeat. Steps must list
// every step the worker holds: one it holds but does not list is released
// for another claim.
//
// Free, optional, is how many more steps the worker could run now: a worker
// that sends 0 (full) may be asked to stop a preemptible step for a more
// urgent one it would claim, found with Handlers and Namespaces (its claim
// predicates; absent: the handlers of its preemptible steps, any
// namespace). A worker
// that never sends Free is never preempted.
type Heartbeat struct {
	Steps      []Fence  `json:"steps"`
	Free       *int     `json:"free,omitempty"`
	Handlers   []string `json:"handlers,omitempty"`
	Namespaces []string `json:"namespaces,omitempty"`
}

// HeartbeatResponse lists the fences the worker no longer holds: it must
// stop those steps and not report them. Preempt lists the steps it must
// stop to make room for more urgent work (at most one): it stops them and
// reports each with Fail.Preempted.
type HeartbeatResponse struct {
	Lost    []Fence   `json:"lost"`
	Preempt []Preempt `json:"preempt,omitempty"`
}

// Preempt asks a worker to stop one step.
type Preempt struct {
	Fence  Fence  `json:"fence"`
	Reason string `json:"reason"`
}

// Complete is the body of POST /v1/workers/{id}/complete.
type Complete struct {
	Fence  *Fence          `json:"fence"`
	Result json.RawMessage `json:"result"`
}

// Fail is the body of POST /v1/workers/{id}/fail.
type Fail struct {
	Fence        *Fence `json:"fence"`
	Error        string `json:"error"`
	Permanent    bool   `json:"permanent,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
	// Preempted: the worker stopped the step because a heartbeat's reply
	// asked it to; Error is the reason it gave. The step returns to ready,
	// its checkpoint kept and its attempt given back.
	Preempted bool `json:"preempted,omitempty"`
	// SnoozeMS: the step is not done yet, and that is no failure: it runs
	// again after this many milliseconds, its attempt given back. Error
	// says why.
	SnoozeMS int64 `json:"snooze_ms,omitempty"`
}

// Reported answers complete and fail: the state the step moved to and, for
// a retry, when it runs again.
type Reported struct {
	State   string     `json:"state"`
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// Error is the error recorded for the step, as stored: for a result
	// that cannot be stored, why the step failed.
	Error string `json:"error,omitempty"`
}

// Checkpoint is the body of POST /v1/workers/{id}/checkpoint.
type Checkpoint struct {
	Fence      *Fence          `json:"fence"`
	Checkpoint json.RawMessage `json:"checkpoint"`
}

// Progress is the body of POST /v1/workers/{id}/progress.
type Progress struct {
	Fence    *Fence   `json:"fence"`
	Fraction *float64 `json:"fraction"`
	Message  string   `json:"message,omitempty"`
}

// ScheduleList is the body of GET /v1/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
}

// ScheduleDetail is the body of GET /v1/schedules/{namespace}/{workflow}/{name}:
// the schedule and its pauses and resumptions, oldest first.
type ScheduleDetail struct {
	Schedule
	Audit []ScheduleAuditEntry `json:"audit"`
}

// PolicyChange is the body of POST /v1/policies: a change of one target's
// policy ("*" for all work, a namespace, or "namespace/workflow"). Fields
// left out are left as they are; the change is audited with the acting
// credential and Reason.
type PolicyChange struct {
	Target      string `json:"target"`
	Paused      *bool  `json:"paused,omitempty"`
	Concurrency *int   `json:"concurrency,omitempty"`
	// Weight is a namespace's weight in the fair shares, 1 to 1000; 0 or
	// 1 sets the default back.
	Weight *int `json:"weight,omitempty"`
	// Rate is a namespace's rate limit, "LIMIT/PER" ("50/s", "100/m",
	// "5/10s"), or "off" (or "0") to remove it.
	Rate   *string `json:"rate,omitempty"`
	Reason string  `json:"reason,omitempty"`
}

// PolicyChanges is the body of GET /v1/policies/changes, newest first.
type PolicyChanges struct {
	Changes []PolicyChangeRecord `json:"changes"`
}

// Duration is a duration as the API writes and reads it: a string of
// whole days ("7d") or Go's syntax ("90s", "1h30m"), the same both ways,
// and the same as in workflow files (workflow.Duration is this type). The
// worker protocol's fields named *_ms are integer milliseconds instead.
type Duration = duration.Duration
