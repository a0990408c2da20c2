// What a worker reports for a handler's result or error, and what it reports
// instead when the server refuses that.

import { APIError, Permanent, RetryAfter, Snooze, Unauthorized } from "./errors.js";
import type { Calls, Complete, Fail } from "./types.js";

/** A step's outcome, without its fence. */
export type Outcome =
  | { kind: "complete"; body: Omit<Complete, "fence"> }
  | { kind: "fail"; body: Omit<Fail, "fence"> }
  | { kind: "calls"; body: Omit<Calls, "fence"> };

const WEEK_MS = 7 * 24 * 3600 * 1000;

/** The completion of a result; throws TypeError if it is not JSON (a failure of the attempt). */
export function completion(result: unknown): Outcome {
  const value = result === undefined ? null : result;
  if (JSON.stringify(value) === undefined) throw new TypeError(`the handler's result is not JSON (${typeof value})`);
  return { kind: "complete", body: { result: value } };
}

/** The failure to report for what a handler threw. */
export function failure(err: unknown): Outcome {
  if (err instanceof Permanent) return { kind: "fail", body: { error: err.message || "permanent failure", permanent: true } };
  if (err instanceof RetryAfter) {
    const ms = Math.round(Math.max(0, Math.min(Number(err.delayMs) || 0, WEEK_MS)));
    return { kind: "fail", body: { error: err.message || "retry requested", retry_after_ms: ms } };
  }
  if (err instanceof Snooze) {
    // At least 1 ms: a snooze_ms of 0 would be a plain failure.
    const ms = Math.round(Math.max(1, Math.min(Number(err.ms) || 0, WEEK_MS)));
    return { kind: "fail", body: { error: err.message || "snoozed", snooze_ms: ms } };
  }
  return { kind: "fail", body: { error: errorText(err) } };
}

/** "TypeError: message", as a failed attempt's error. */
export function errorText(err: unknown): string {
  if (err instanceof Error) return err.message ? `${err.name}: ${err.message}` : err.name;
  return String(err);
}

/**
 * The failure to report in place of an outcome the server refused with err
 * (a 4xx): a refused result fails the step for good, naming the refusal; a
 * refused failure is sent again with its error text alone (a refused
 * preemption or snooze becomes a plain failure).
 */
export function refusedOutcome(outcome: Outcome, err: APIError): Omit<Fail, "fence"> {
  const refusal = storable(err.toString());
  if (outcome.kind === "complete") {
    return { error: `the server refused the result: ${refusal.slice(0, 4096)}`, permanent: true };
  }
  if (outcome.kind === "calls") {
    return { error: `the server refused the function's calls: ${refusal.slice(0, 4096)}`, permanent: true };
  }
  const text = storable(outcome.body.error || "failed").slice(0, 60000);
  const out: Omit<Fail, "fence"> = { error: `${text} (the server refused the report: ${refusal.slice(0, 1024)})` };
  if (outcome.body.permanent) out.permanent = true;
  return out;
}

/** Whether a refusal of an outcome is final for the report but not for the step (a 4xx but the fencing and credential ones). */
export function refusedForGood(err: unknown): err is APIError {
  return (
    err instanceof APIError &&
    err.status >= 400 &&
    err.status < 500 &&
    err.code !== "stale_lease" &&
    err.code !== "worker_lost" &&
    !(err instanceof Unauthorized)
  );
}

/** text with each NUL and each lone surrogate replaced with U+FFFD. */
export function storable(text: string): string {
  return text.replace(/\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g, "\uFFFD");
}

/** A duration as Go prints it: 500ms, 1s, 1.5s, 2m0s, 1h0m0s. */
export function formatDuration(ms: number): string {
  const total = Math.round(ms);
  if (total < 1000) return `${total}ms`;
  const h = Math.floor(total / 3_600_000);
  const m = Math.floor((total % 3_600_000) / 60_000);
  const s = String(Number(((total % 60_000) / 1000).toFixed(3)));
  if (h) return `${h}h${m}m${s}s`;
  if (m) return `${m}m${s}s`;
  return `${s}s`;
}
