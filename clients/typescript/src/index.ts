// @weft/client: a client and a remote worker for weft's REST API.
//
//   import { Client, Worker, Permanent } from "@weft/client";
//
// Client submits, reads, signals, cancels and retries tasks and follows the
// event stream; Worker serves handlers over the remote-worker protocol
// (docs/remote-workers.md). Types are generated from server/openapi.json.

export { Client, type BatchTask, type ClientOptions, type EventOptions, type SubmitOptions } from "./client.js";
export {
  APIError,
  Interrupted,
  Permanent,
  Preempted,
  RetryAfter,
  ServerUnavailable,
  Snooze,
  StaleLease,
  TransportError,
  Unauthorized,
  WorkerLost,
  type APIErrorCode,
} from "./errors.js";
export { defaultLogger, type Logger } from "./log.js";
export { CallError, FunctionContext, Future, type CallOptions, type DurableFunction } from "./function.js";
export { formatDuration } from "./outcomes.js";
export { Step } from "./step.js";
export { Worker, type Handler, type WorkerOptions } from "./worker.js";
export * from "./types.js";
export type { components, operations, paths } from "./api.js";
