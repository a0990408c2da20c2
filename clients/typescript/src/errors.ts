// The errors of @weft/client.
//
// Handlers throw Permanent or RetryAfter to say how their attempt failed, and
// Snooze to say the step is not done yet (no failure). The client throws
// APIError (and its subclasses) for error responses of the server,
// TransportError when no usable response came, and ServerUnavailable when it
// gave up retrying a request.

import type { ErrorCode } from "./types.js";

/** A code of the API, or http_<status> for an error response that is not weft's JSON (a proxy's, say). */
export type APIErrorCode = ErrorCode | `http_${number}`;

/** An error response of the weft API: its HTTP status and stable code. */
export class APIError extends Error {
  override name = "APIError";

  constructor(
    readonly status: number,
    readonly code: APIErrorCode,
    message: string,
    readonly field?: string,
    /** The server's Retry-After, in milliseconds. */
    readonly retryAfterMs?: number,
  ) {
    super(message);
  }

  /** "409 stale_lease: …", as logged. */
  override toString(): string {
    return `${this.status} ${this.code}: ${this.message}`;
  }
}

/**
 * The step is no longer held by this attempt: it was cancelled, timed out,
 * or taken over by another worker. Its outcome belongs to someone else.
 */
export class StaleLease extends APIError {
  override name = "StaleLease";
}

/**
 * The server does not know the worker (any more): it was declared dead or
 * deregistered. The worker registers again; its steps were reclaimed.
 */
export class WorkerLost extends APIError {
  override name = "WorkerLost";
}

/**
 * The server refused the credentials (401) or they lack the permission
 * (403). Retrying cannot help.
 */
export class Unauthorized extends APIError {
  override name = "Unauthorized";
}

/** No usable response: the connection failed, timed out, or the answer was not JSON. */
export class TransportError extends Error {
  override name = "TransportError";
}

/**
 * A request kept failing (connection errors, timeouts, 5xx, 429) for the
 * whole retry window. The last error is its cause.
 */
export class ServerUnavailable extends Error {
  override name = "ServerUnavailable";

  constructor(
    readonly what: string,
    readonly elapsedMs: number,
    readonly attempts: number,
    readonly lastError: Error,
  ) {
    super(
      `${what}: the server did not answer for ${(elapsedMs / 1000).toFixed(1)}s (${attempts} attempts); last error: ${describe(lastError)}`,
      { cause: lastError },
    );
  }
}

/** A retrying request stopped because its stop signal was aborted. */
export class Interrupted extends Error {
  override name = "Interrupted";
}

/** Throw from a handler to fail the step at once, without retrying. */
export class Permanent extends Error {
  override name = "Permanent";
}

/**
 * Throw from a handler to fail the attempt and retry after delayMs (instead
 * of the retry policy's backoff; its max attempts still apply).
 */
export class RetryAfter extends Error {
  override name = "RetryAfter";

  constructor(
    readonly delayMs: number,
    message = "retry requested",
  ) {
    super(message);
  }
}

/**
 * Throw from a handler to say the step is not done yet, and that is no
 * failure: it runs again after ms (up to a week) with the same attempt number
 * (the attempt is given back; the retry policy is not used). The message says
 * why.
 */
export class Snooze extends Error {
  override name = "Snooze";

  constructor(
    readonly ms: number,
    message = "snoozed",
  ) {
    super(message);
  }
}

/**
 * Thrown by Step.throwIfPreempted() (and the reason of step.signal) once the
 * server asked the worker to stop the step for more urgent work. Whatever a
 * handler throws after the preemption reports the step preempted: it goes
 * back to the queue keeping its checkpoint, without using an attempt.
 */
export class Preempted extends Error {
  override name = "Preempted";
}

/** An error as logged: "409 stale_lease: …" for an APIError, else "Name: message". */
export function describe(err: unknown): string {
  if (err instanceof APIError) return err.toString();
  if (err instanceof Error) {
    const cause = err.cause instanceof Error ? ` (${err.cause.message})` : "";
    return err.message ? `${err.name}: ${err.message}${cause}` : err.name;
  }
  return String(err);
}

const explained = new WeakSet<Unauthorized>();

/** err with a message that names the problem of the credentials (once): what a refused worker stops with. */
export function authError(err: Unauthorized, during: string): Unauthorized {
  if (explained.has(err)) return err;
  const hint =
    err.status === 401
      ? "the server did not accept the token: check the API key or JWT (WEFT_TOKEN)"
      : "the token lacks the workers:connect permission";
  const out = new Unauthorized(err.status, err.code, `${during} refused: ${hint} (${err.message})`, err.field);
  explained.add(out);
  return out;
}
