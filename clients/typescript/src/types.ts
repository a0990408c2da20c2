// Friendly names for the types generated from server/openapi.json (src/api.ts),
// and the error codes as a runtime list that the compiler checks against them.

import type { components, operations } from "./api.js";

type Schemas = components["schemas"];

export type Task = Schemas["Task"];
export type TaskState = Task["state"];
/** A step of a task, as the API shows it (the Step class is what a handler gets). */
export type TaskStep = Schemas["Step"];
export type StepState = TaskStep["state"];
export type TaskList = Schemas["TaskList"];
export type AuditEntry = Schemas["AuditEntry"];
export type SubmitRequest = Schemas["SubmitRequest"];
export type SubmitResponse = Schemas["SubmitResponse"];
export type SubmitBatch = Schemas["SubmitBatch"];
export type SubmittedBatch = Schemas["SubmittedBatch"];
export type SignalResult = Schemas["SignalResult"];
export type TaskAction = Schemas["TaskAction"];
export type TaskFilter = Schemas["TaskFilter"];
export type BulkRequest = Schemas["BulkRequest"];
export type BulkResult = Schemas["BulkResult"];
export type Event = Schemas["Event"];
export type EventType = Event["type"];
export type ErrorBody = Schemas["ErrorBody"];
export type ErrorCode = Schemas["Error"]["code"];

export type RegisterWorker = Schemas["RegisterWorker"];
export type WorkerRegistered = Schemas["WorkerRegistered"];
export type ClaimRequest = Schemas["ClaimRequest"];
export type ClaimedStep = Schemas["ClaimedStep"];
export type Fence = Schemas["Fence"];
export type Heartbeat = Schemas["Heartbeat"];
export type Preempt = Schemas["Preempt"];
export type Complete = Schemas["Complete"];
export type Fail = Schemas["Fail"];
export type Calls = Schemas["Calls"];
export type Call = Schemas["Call"];
export type RecordedCall = Schemas["RecordedCall"];
export type Checkpoint = Schemas["Checkpoint"];
export type Progress = Schemas["Progress"];
export type Reported = Schemas["Reported"];

type JSONOf<R> = R extends { content: { "application/json": infer T } } ? T : never;

/** The answer to a heartbeat: fences no longer held, and steps to preempt. */
export type HeartbeatReply = JSONOf<operations["heartbeat"]["responses"][200]>;
/** The answer to a claim: the steps claimed (possibly none). */
export type ClaimReply = JSONOf<operations["claim"]["responses"][200]>;
/** The answer to GET /v1/tasks/{id}/audit. */
export type AuditReply = JSONOf<operations["taskAudit"]["responses"][200]>;
/** The query of GET /v1/tasks: filters and paging (limit, cursor). */
export type TaskQuery = NonNullable<operations["listTasks"]["parameters"]["query"]>;
/** The query of GET /v1/events: filters and the cursor to resume after. */
export type EventQuery = NonNullable<operations["streamEvents"]["parameters"]["query"]>;

// Every error code of the API. A Record over the generated enum: the compiler
// refuses this object when the document gains or drops a code.
const errorCodes: Record<ErrorCode, true> = {
  invalid_json: true,
  unknown_field: true,
  invalid_field: true,
  body_too_large: true,
  unauthenticated: true,
  forbidden: true,
  not_found: true,
  conflict: true,
  stale_lease: true,
  worker_lost: true,
  overloaded: true,
  timeout: true,
  unavailable: true,
  internal: true,
  invalid_workflow: true,
  method_not_allowed: true,
};

/** Every error code of the API, as the document lists them. */
export const ERROR_CODES = Object.keys(errorCodes) as readonly ErrorCode[];

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && Object.hasOwn(errorCodes, value);
}
