// The task side of weft's REST API: submit, read, signal, cancel and retry
// tasks, act on many at once, and follow the event stream.
//
// Error responses throw APIError (with the server's status and stable code);
// no response at all throws TransportError. Nothing is retried but the event
// stream's connection: give submissions an idempotency key to retry them
// safely yourself.

import { Interrupted, TransportError } from "./errors.js";
import { readEvents } from "./sse.js";
import { Transport, retryable, sleep, type TransportOptions } from "./transport.js";
import type {
  AuditEntry,
  AuditReply,
  BulkRequest,
  BulkResult,
  Event,
  EventQuery,
  SignalResult,
  SubmitBatch,
  SubmitRequest,
  SubmitResponse,
  SubmittedBatch,
  Task,
  TaskList,
  TaskQuery,
} from "./types.js";

export type ClientOptions = TransportOptions;

export interface SubmitOptions {
  /** The idempotency key: a second submission with it returns the first task. */
  key?: string;
  priority?: number;
  /** Labels ({env: "staging"}) that listings and bulk actions filter by. */
  tags?: Record<string, string>;
  /** Do not start before this time. */
  runAt?: Date | string;
  /** Expire the task if it has not ended by this time. */
  goodUntil?: Date | string;
  /** When the key exists: return its task (default) or supersede it. */
  onConflict?: SubmitRequest["on_conflict"];
  /** A W3C traceparent: the task's steps continue that trace. */
  traceparent?: string;
}

export interface EventOptions {
  /** Aborting it ends the iteration (without an error). */
  signal?: AbortSignal;
  /**
   * Reconnect when the stream ends or fails with what may pass (the server
   * restarting, say), resuming after the last event received: none missed,
   * none twice. Default true.
   */
  reconnect?: boolean;
}

/**
 * A client of the task API. The token needs the permission of each call:
 * tasks:create to submit, tasks:read to read and follow events,
 * tasks:signal, tasks:cancel, tasks:retry, tasks:delete.
 */
export class Client {
  private readonly t: Transport;

  constructor(url: string, options: ClientOptions = {}) {
    this.t = new Transport(url, { userAgent: "weft-client-typescript", ...options });
  }

  /**
   * Create a task of workflow ("ns/name" or "ns/name@version") and return
   * it: 201 a new task, or (200) the existing one its key names.
   */
  async submit(workflow: string, input?: unknown, options: SubmitOptions = {}): Promise<SubmitResponse> {
    const headers = options.traceparent ? { traceparent: options.traceparent } : undefined;
    return this.t.request<SubmitResponse>("POST", "/v1/tasks", submission(workflow, input, options), { headers });
  }

  /**
   * Submits up to 1000 tasks in one request and one transaction: all of them or none.
   * Returns them in the order given, each with `duplicate: true` where its key existed;
   * a refused task throws an APIError naming it by index (field `tasks[2].priority`).
   */
  async submitMany(tasks: BatchTask[], options: { traceparent?: string } = {}): Promise<SubmitResponse[]> {
    if (tasks.length === 0) throw new RangeError("submitMany: no tasks");
    const body: SubmitBatch = { tasks: tasks.map((t) => submission(t.workflow, t.input, t)) };
    const headers = options.traceparent ? { traceparent: options.traceparent } : undefined;
    const out = await this.t.request<SubmittedBatch>("POST", "/v1/tasks/batch", body, { headers });
    return out.tasks;
  }

  /** The task with its steps and their results. */
  task(id: number): Promise<Task> {
    return this.t.request<Task>("GET", `/v1/tasks/${taskId(id)}`);
  }

  /** One page of tasks, newest first; pass next_cursor as cursor for the next page. */
  tasks(query: TaskQuery = {}): Promise<TaskList> {
    return this.t.request<TaskList>("GET", `/v1/tasks${queryString(query)}`);
  }

  /** Every task the query selects, newest first, page after page. */
  async *allTasks(query: TaskQuery = {}): AsyncGenerator<Task> {
    let cursor = query.cursor;
    do {
      const page = await this.tasks(cursor === undefined ? query : { ...query, cursor });
      yield* page.tasks;
      cursor = page.next_cursor || undefined;
    } while (cursor !== undefined);
  }

  /** Every transition of the task, oldest first. */
  async audit(id: number): Promise<AuditEntry[]> {
    const reply = await this.t.request<AuditReply>("GET", `/v1/tasks/${taskId(id)}/audit`);
    return reply.audit ?? [];
  }

  /**
   * Send the signal name, with a JSON payload (absent is null), to a task.
   * True when a waiting step took it at once, false when it is kept for the
   * next step that begins to wait for it. A task that has ended: APIError 409.
   */
  async signal(id: number, name: string, payload?: unknown): Promise<boolean> {
    if (typeof name !== "string" || name === "") throw new TypeError("signal name: want a non-empty string");
    const path = `/v1/tasks/${taskId(id)}/signals/${encodeURIComponent(name)}`;
    const reply = await this.t.request<SignalResult>("POST", path, payload === undefined ? undefined : { payload });
    return reply.delivered;
  }

  /** Cancel a task (the reason goes to its audit trail); APIError 409 if it already ended. */
  cancel(id: number, reason?: string): Promise<Task> {
    return this.t.request<Task>("POST", `/v1/tasks/${taskId(id)}/cancel`, reason === undefined ? undefined : { reason });
  }

  /** Retry a failed task from its failed steps; APIError 409 otherwise. */
  retry(id: number, reason?: string): Promise<Task> {
    return this.t.request<Task>("POST", `/v1/tasks/${taskId(id)}/retry`, reason === undefined ? undefined : { reason });
  }

  /** Cancel the pending and running tasks a filter (or ids) selects. */
  cancelTasks(request: BulkRequest): Promise<BulkResult> {
    return this.t.request<BulkResult>("POST", "/v1/tasks/cancel", request);
  }

  /** Retry the failed tasks a filter (or ids) selects. */
  retryTasks(request: BulkRequest): Promise<BulkResult> {
    return this.t.request<BulkResult>("POST", "/v1/tasks/retry", request);
  }

  /** Delete the finished tasks a filter (or ids) selects (force: cancel unfinished ones first). */
  deleteTasks(request: BulkRequest): Promise<BulkResult> {
    return this.t.request<BulkResult>("POST", "/v1/tasks/delete", request);
  }

  /**
   * The lifecycle events of the tasks the query selects, as they happen
   * (GET /v1/events). Without query.after the stream starts from now;
   * after: "start" starts from the oldest event kept, after: event.cursor
   * after that event. Ends when options.signal is aborted or the loop breaks.
   */
  async *events(query: EventQuery = {}, options: EventOptions = {}): AsyncGenerator<Event> {
    const { signal, reconnect = true } = options;
    let lastId: string | undefined;
    let failures = 0;
    for (;;) {
      const headers: Record<string, string> = { Accept: "text/event-stream" };
      // Last-Event-ID takes precedence over query.after: a reconnection resumes.
      if (lastId !== undefined) headers["Last-Event-ID"] = lastId;
      try {
        const resp = await this.t.send("GET", `/v1/events${queryString(query)}`, undefined, { timeoutMs: 0, signal, headers });
        if (resp.body === null) throw new TransportError("GET /v1/events: the response has no body");
        for await (const sse of readEvents(resp.body)) {
          if (signal?.aborted) return;
          yield parseEvent(sse.data);
          lastId = sse.id;
          failures = 0;
        }
      } catch (err) {
        if (err instanceof Interrupted || signal?.aborted) return;
        // A TypeError is the body cut short (the server went away mid-stream).
        if (!reconnect || !(retryable(err) || err instanceof TypeError)) throw err;
      }
      if (!reconnect) return;
      // The stream ended (the server stopping) or failed: come back after a pause.
      failures++;
      if (await sleep(this.t.backoff(failures), signal)) return;
    }
  }
}

/** An event's data; a server that sends another is wrong, and reconnecting would not help. */
function parseEvent(data: string): Event {
  try {
    return JSON.parse(data) as Event;
  } catch (err) {
    throw new Error(`GET /v1/events: an event's data is not JSON: ${data.slice(0, 200)}`, { cause: err });
  }
}

function taskId(id: number): number {
  if (typeof id !== "number" || !Number.isSafeInteger(id) || id <= 0) {
    throw new TypeError(`task id ${JSON.stringify(id)}: want a positive integer`);
  }
  return id;
}

function timestamp(when: Date | string): string {
  return when instanceof Date ? when.toISOString() : when;
}

function queryString(query: Record<string, string | number | boolean | string[] | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(query)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) params.append(name, String(v));
  }
  const s = params.toString();
  return s ? `?${s}` : "";
}

/** One task of Client.submitMany: the workflow, its input and submit's options. */
export interface BatchTask extends Omit<SubmitOptions, "traceparent"> {
  workflow: string;
  input?: unknown;
}

function submission(workflow: string, input: unknown, options: Omit<SubmitOptions, "traceparent">): SubmitRequest {
  const body: SubmitRequest = { workflow };
  if (input !== undefined) body.input = input;
  if (options.key !== undefined) body.idempotency_key = options.key;
  if (options.priority !== undefined) body.priority = options.priority;
  if (options.tags !== undefined) {
    const tags: unknown = options.tags;
    if (typeof tags !== "object" || tags === null || !Object.values(tags).every((v) => typeof v === "string")) {
      throw new TypeError("tags must be an object of string to string");
    }
    body.tags = options.tags;
  }
  if (options.runAt !== undefined) body.run_at = timestamp(options.runAt);
  if (options.goodUntil !== undefined) body.good_until = timestamp(options.goodUntil);
  if (options.onConflict !== undefined) body.on_conflict = options.onConflict;
  return body;
}
