package wire

import (
	"encoding/json"
	"time"

	"github.com/weftrun/weft/internal/redact"
	"github.com/weftrun/weft/state"
	"github.com/weftrun/weft/store"
)

// The records the API sends: tasks, steps, audit entries, events,
// webhooks, schedules, policies, breakers, retention and the operator log.
// Each is the JSON form of a storage record, made from it by its Of
// function here and nowhere else, so that the storage record can change
// without changing the API (and the other way round). The golden files
// under testdata pin their JSON.

// List converts a list of storage records with of; nil stays nil and an
// empty list stays empty, which JSON tells apart (null and []).
func List[S, W any](ss []S, of func(S) W) []W {
	if ss == nil {
		return nil
	}
	out := make([]W, len(ss))
	for i, s := range ss {
		out[i] = of(s)
	}
	return out
}

// Task is a task, with its steps when it is read alone.
type Task struct {
	ID             int64           `json:"id"`
	Namespace      string          `json:"namespace"`
	Workflow       string          `json:"workflow"`
	Version        string          `json:"version"`
	State          state.Task      `json:"state"`
	Input          json.RawMessage `json:"input"`
	Priority       int             `json:"priority"`
	IdempotencyKey string          `json:"idempotency_key,omitempty"`
	RunAt          time.Time       `json:"run_at"`
	GoodUntil      *time.Time      `json:"good_until,omitempty"`
	CreatedAt      time.Time       `json:"created_at"`
	StartedAt      *time.Time      `json:"started_at,omitempty"`
	FinishedAt     *time.Time      `json:"finished_at,omitempty"`
	Error          string          `json:"error,omitempty"`
	// Schedule names the schedule that submitted the task and
	// ScheduleTick the tick it was submitted for.
	Schedule     string     `json:"schedule,omitempty"`
	ScheduleTick *time.Time `json:"schedule_tick,omitempty"`
	// ParentTaskID and ParentStep name the task and step that started this
	// task as a child, Depth counts the tasks above it, Children lists the
	// tasks it started, oldest first.
	ParentTaskID int64             `json:"parent_task_id,omitempty"`
	ParentStep   string            `json:"parent_step,omitempty"`
	Depth        int               `json:"depth,omitempty"`
	Children     []int64           `json:"children,omitempty"`
	Tags         map[string]string `json:"tags,omitempty"`
	// Attention says why the task needs a person (lists filtered by
	// attention only).
	Attention []string `json:"attention,omitempty"`
	// Active lists an unfinished task's ready, running and waiting steps,
	// in order: where it stands (lists asked with active=true only).
	Active []Step `json:"active,omitempty"`
	Steps  []Step `json:"steps,omitempty"`
}

// TaskOf is the API's form of a stored task.
func TaskOf(t store.Task) Task {
	return Task{
		ID: t.ID, Namespace: t.Namespace, Workflow: t.Workflow, Version: t.Version, State: t.State,
		Input: t.Input, Priority: t.Priority, IdempotencyKey: t.IdempotencyKey, RunAt: t.RunAt,
		GoodUntil: t.GoodUntil, CreatedAt: t.CreatedAt, StartedAt: t.StartedAt, FinishedAt: t.FinishedAt,
		Error: t.Error, Schedule: t.Schedule, ScheduleTick: t.ScheduleTick, ParentTaskID: t.ParentTaskID,
		ParentStep: t.ParentStep, Depth: t.Depth, Children: t.Children, Tags: t.Tags, Attention: t.Attention,
		Active: List(t.Active, StepOf), Steps: List(t.Steps, StepOf),
	}
}

// Step is a step of a task.
type Step struct {
	ID          int64           `json:"id"`
	TaskID      int64           `json:"task_id"`
	Index       int             `json:"index"`
	Name        string          `json:"name"`
	Handler     string          `json:"handler"`
	Namespace   string          `json:"namespace"`
	State       state.Step      `json:"state"`
	Sub         string          `json:"sub_status,omitempty"` // "deferred" while running
	DependsOn   []string        `json:"depends_on,omitempty"`
	Attempts    int             `json:"attempts"`
	MaxAttempts int             `json:"max_attempts"`
	Priority    int             `json:"priority"`
	Result      json.RawMessage `json:"result,omitempty"`
	Error       string          `json:"error,omitempty"`
	Checkpoint  json.RawMessage `json:"checkpoint,omitempty"`
	Kind        string          `json:"kind,omitempty"`
	// Template names the step template an item of a batch runs, and Item
	// is its batch item.
	Template        string          `json:"template,omitempty"`
	Item            json.RawMessage `json:"batch,omitempty"`
	Signal          string          `json:"signal,omitempty"`
	Progress        *float64        `json:"progress,omitempty"`
	ProgressMessage string          `json:"progress_message,omitempty"`
	RunAt           *time.Time      `json:"run_at,omitempty"`
	EngineID        string          `json:"engine_id,omitempty"`
	StartedAt       *time.Time      `json:"started_at,omitempty"`
	Deadline        *time.Time      `json:"deadline,omitempty"`
	FinishedAt      *time.Time      `json:"finished_at,omitempty"`
	ChildTaskID     int64           `json:"child_task_id,omitempty"`
	ChildError      string          `json:"child_error,omitempty"`
	Preemptible     bool            `json:"preemptible,omitempty"`
}

// StepOf is the API's form of a stored step: a result or checkpoint that
// is JSON null is absent, as one the step does not have; a durable
// function's call (a call, or a child started by one) keeps what it
// records of itself.
func StepOf(s store.Step) Step {
	out := Step(s)
	out.Result, out.Checkpoint = nonNull(out.Result), nonNull(out.Checkpoint)
	if out.Kind == store.KindCall || out.Kind == store.KindWorkflow {
		out.Item = nil
	}
	return out
}

// nonNull is v, or nil when v is JSON null.
func nonNull(v json.RawMessage) json.RawMessage {
	if string(v) == "null" {
		return nil
	}
	return v
}

// AuditEntry is one transition of a task or step in its audit trail.
type AuditEntry struct {
	ID       int64     `json:"id"`
	TaskID   int64     `json:"task_id"`
	Step     string    `json:"step,omitempty"`
	From     string    `json:"from"`
	To       string    `json:"to"`
	At       time.Time `json:"at"`
	Attempt  int       `json:"attempt,omitempty"`
	EngineID string    `json:"engine_id,omitempty"`
	Reason   string    `json:"reason,omitempty"`
}

// AuditEntryOf is the API's form of a stored audit entry.
func AuditEntryOf(a store.AuditEntry) AuditEntry { return AuditEntry(a) }

// Event is one event of GET /v1/events and of a webhook delivery: a
// transition of a task or step, with its position in the history (Cursor,
// also the SSE id).
type Event struct {
	Cursor    string `json:"cursor"`
	Type      string `json:"type"`
	Namespace string `json:"namespace"`
	Workflow  string `json:"workflow"`
	AuditEntry
}

// EventOf is the API's form of a history event.
func EventOf(e store.HistoryEvent) Event {
	return Event{Cursor: e.Cursor, Type: e.Type, Namespace: e.Namespace, Workflow: e.Workflow, AuditEntry: AuditEntry(e.AuditEntry)}
}

// Webhook is a webhook subscription; Secret is set only in the answer to
// its creation.
type Webhook struct {
	ID        int64    `json:"id"`
	URL       string   `json:"url"`
	Secret    string   `json:"secret,omitempty"`
	Namespace string   `json:"namespace,omitempty"`
	Workflow  string   `json:"workflow,omitempty"`
	Types     []string `json:"types,omitempty"`
	Cursor    string   `json:"cursor"`
	State     string   `json:"state"`
	Failures  int      `json:"failures"`
	LastError string   `json:"last_error,omitempty"`
	// NextAttemptAt is when a failing webhook is tried again; absent
	// when it is not waiting to retry.
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
	Delivered     int64      `json:"delivered"`
	CreatedAt     time.Time  `json:"created_at"`
	CreatedBy     string     `json:"created_by,omitempty"`
}

// WebhookOf is the API's form of a stored webhook. The store keeps the
// URL's credentials for deliveries; the API shows its password hidden
// (https://user:xxxxx@host/path), in the URL and in the last error alike.
func WebhookOf(w store.Webhook) Webhook {
	out := Webhook{ID: w.ID, URL: redact.URL(w.URL), Secret: w.Secret, Namespace: w.Namespace, Workflow: w.Workflow, Types: w.Types,
		Cursor: w.Cursor, State: w.State, Failures: w.Failures, LastError: redact.Text(w.LastError, w.URL), Delivered: w.Delivered,
		CreatedAt: w.CreatedAt, CreatedBy: w.CreatedBy}
	if w.NextAttemptAt.UnixMicro() > 0 {
		out.NextAttemptAt = &w.NextAttemptAt
	}
	return out
}

// Breaker is the state of one circuit breaker of a step, as listed in
// PolicyReport.Breakers and returned by POST /v1/breakers/reset.
type Breaker struct {
	Key         string     `json:"key"`
	State       string     `json:"state"`
	Failures    int        `json:"failures"`
	Threshold   int        `json:"threshold"`
	Cooldown    Duration   `json:"cooldown"`
	OpenedAt    *time.Time `json:"opened_at,omitempty"`
	ProbeAt     *time.Time `json:"probe_at,omitempty"`
	ProbeStepID int64      `json:"probe_step_id,omitempty"`
	RetryAt     *time.Time `json:"retry_at,omitempty"`
	UpdatedAt   time.Time  `json:"updated_at"`
}

// BreakerOf is the API's form of a breaker.
func BreakerOf(b store.Breaker) Breaker {
	return Breaker{Key: b.Key, State: b.State, Failures: b.Failures, Threshold: b.Threshold, Cooldown: Duration(b.Cooldown),
		OpenedAt: b.OpenedAt, ProbeAt: b.ProbeAt, ProbeStepID: b.ProbeStepID, RetryAt: b.RetryAt, UpdatedAt: b.UpdatedAt}
}

// ScheduleKey names a schedule: namespace/workflow and the schedule's name.
type ScheduleKey struct {
	Namespace string `json:"namespace"`
	Workflow  string `json:"workflow"`
	Name      string `json:"name"`
}

// String returns "namespace/workflow/name".
func (k ScheduleKey) String() string { return store.ScheduleKey(k).String() }

// Schedule is a registered cron schedule (GET /v1/schedules).
type Schedule struct {
	ScheduleKey
	Version    string          `json:"version"`
	Cron       string          `json:"cron"`
	TimeZone   string          `json:"time_zone,omitempty"`
	Input      json.RawMessage `json:"input"`
	CatchUp    string          `json:"catch_up"`
	MaxCatchUp int             `json:"max_catch_up"`
	Paused     bool            `json:"paused"`
	LastTick   *time.Time      `json:"last_tick,omitempty"`
	NextTick   time.Time       `json:"next_tick"`
	CreatedAt  time.Time       `json:"created_at"`
	UpdatedAt  time.Time       `json:"updated_at"`
}

// ScheduleOf is the API's form of a stored schedule.
func ScheduleOf(s store.ScheduleRecord) Schedule {
	return Schedule{
		ScheduleKey: ScheduleKey(s.ScheduleKey), Version: s.Version, Cron: s.Cron, TimeZone: s.TimeZone,
		Input: s.Input, CatchUp: s.CatchUp, MaxCatchUp: s.MaxCatchUp, Paused: s.Paused,
		LastTick: s.LastTick, NextTick: s.NextTick, CreatedAt: s.CreatedAt, UpdatedAt: s.UpdatedAt,
	}
}

// ScheduleAuditEntry is a pause or resumption of a schedule.
type ScheduleAuditEntry struct {
	At     time.Time `json:"at"`
	Action string    `json:"action"` // "paused" or "resumed"
	Actor  string    `json:"actor"`
	Reason string    `json:"reason,omitempty"`
}

// ScheduleAuditEntryOf is the API's form of a schedule's audit entry.
func ScheduleAuditEntryOf(a store.ScheduleAuditEntry) ScheduleAuditEntry {
	return ScheduleAuditEntry(a)
}

// Rate is a rate limit; its JSON is its text, "LIMIT/PER".
type Rate = store.Rate

// Policy is the scheduling policy of a target, with its namespace's use.
type Policy struct {
	Target      string    `json:"target"`
	Paused      bool      `json:"paused"`
	Concurrency int       `json:"concurrency,omitempty"`
	Weight      int       `json:"weight,omitempty"`
	UpdatedAt   time.Time `json:"updated_at"`
	UpdatedBy   string    `json:"updated_by"`
	Running     int       `json:"running"`
	Rate        *Rate     `json:"rate,omitempty"`
	Tokens      *float64  `json:"tokens,omitempty"`
}

// PolicyOf is the API's form of a policy.
func PolicyOf(p store.Policy) Policy { return Policy(p) }

// LimitUsage is a concurrency limit of a template and how much of it is
// used.
type LimitUsage struct {
	Key     string `json:"key"`
	Limit   int    `json:"limit"`
	Running int    `json:"running"`
}

// RateUsage is the token bucket of a rate limit.
type RateUsage struct {
	Key           string     `json:"key"`
	Rate          Rate       `json:"rate"`
	Tokens        float64    `json:"tokens"`
	DeferredUntil *time.Time `json:"deferred_until,omitempty"`
}

// PolicyReport is the body of GET /v1/policies.
type PolicyReport struct {
	Policies []Policy     `json:"policies"`
	Limits   []LimitUsage `json:"limits"`
	Rates    []RateUsage  `json:"rates"`
	Breakers []Breaker    `json:"breakers"`
}

// PolicyReportOf is the API's form of a policy report.
func PolicyReportOf(r store.PolicyReport) PolicyReport {
	return PolicyReport{
		Policies: List(r.Policies, PolicyOf),
		Limits:   List(r.Limits, func(l store.LimitUsage) LimitUsage { return LimitUsage(l) }),
		Rates:    List(r.Rates, func(u store.RateUsage) RateUsage { return RateUsage(u) }),
		Breakers: List(r.Breakers, BreakerOf),
	}
}

// RatesInForce lists the rates in force: the namespaces' (keyed by
// namespace, with their tokens now), then the buckets of the rates that
// templates define.
func (r PolicyReport) RatesInForce() []RateUsage {
	var out []RateUsage
	for _, p := range r.Policies {
		if p.Rate != nil && p.Tokens != nil {
			out = append(out, RateUsage{Key: p.Target, Rate: *p.Rate, Tokens: *p.Tokens})
		}
	}
	return append(out, r.Rates...)
}

// PolicyChangeRecord is one audited policy change.
type PolicyChangeRecord struct {
	ID     int64     `json:"id"`
	At     time.Time `json:"at"`
	Actor  string    `json:"actor"`
	Target string    `json:"target"`
	Change string    `json:"change"`
	Reason string    `json:"reason,omitempty"`
}

// PolicyChangeRecordOf is the API's form of a policy change.
func PolicyChangeRecordOf(c store.PolicyChangeRecord) PolicyChangeRecord {
	return PolicyChangeRecord(c)
}

// RetentionSetting is how long the finished tasks of a namespace in one
// state are kept.
type RetentionSetting struct {
	Namespace string     `json:"namespace"`
	State     state.Task `json:"state"`
	Keep      Duration   `json:"keep"`
	UpdatedAt time.Time  `json:"updated_at"`
	UpdatedBy string     `json:"updated_by,omitempty"`
}

// RetentionSettingOf is the API's form of a retention.
func RetentionSettingOf(r store.Retention) RetentionSetting {
	return RetentionSetting{Namespace: r.Namespace, State: r.State, Keep: Duration(r.Keep), UpdatedAt: r.UpdatedAt, UpdatedBy: r.UpdatedBy}
}

// OperatorEntry is one entry of the operator log.
type OperatorEntry struct {
	ID      int64     `json:"id"`
	At      time.Time `json:"at"`
	Actor   string    `json:"actor"`
	Action  string    `json:"action"`  // "delete", "retention"
	Subject string    `json:"subject"` // "task 42", "namespace shop"
	Reason  string    `json:"reason,omitempty"`
}

// OperatorEntryOf is the API's form of an operator log entry.
func OperatorEntryOf(e store.OperatorEntry) OperatorEntry { return OperatorEntry(e) }

// ArchivedTask is one line of a delete's archive file: the task with its
// steps and its audit trail.
type ArchivedTask struct {
	Task  Task         `json:"task"`
	Audit []AuditEntry `json:"audit"`
}

// ArchivedTaskOf is the archive's form of a deleted task.
func ArchivedTaskOf(a store.ArchivedTask) ArchivedTask {
	return ArchivedTask{Task: TaskOf(a.Task), Audit: List(a.Audit, AuditEntryOf)}
}

// APIKey is a credential of the API as listed (weft keys list --json):
// never its hash.
type APIKey struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	Permissions []string   `json:"permissions"`
	CreatedAt   time.Time  `json:"created_at"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
}

// APIKeyOf is the listed form of a stored API key.
func APIKeyOf(k store.APIKey) APIKey {
	return APIKey{ID: k.ID, Name: k.Name, Permissions: k.Permissions, CreatedAt: k.CreatedAt, RevokedAt: k.RevokedAt}
}
