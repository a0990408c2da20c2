// Step: what a handler sees of the step it runs, and what it may report.

import { Preempted, StaleLease } from "./errors.js";
import { sleep } from "./transport.js";
import type { ClaimedStep, Fence } from "./types.js";

/**
 * The states of a step on the worker. running: its handler runs; reporting:
 * its outcome (or its timeout) is being reported; settled: nothing more to
 * do, the step is no longer listed in heartbeats.
 */
export type HeldState = "running" | "reporting" | "settled";

/** What a step asks of its worker: the reports of its handler. */
export interface StepReporter {
  checkpoint(step: Step, value: unknown): Promise<void>;
  progress(step: Step, fraction: number, message: string): Promise<boolean>;
}

/** The key of a claim: step id, attempt and lease id. */
export function fenceKey(fence: Fence): string {
  return `${fence.step_id}/${fence.attempt}/${fence.lease_id}`;
}

/**
 * One claimed attempt of a step, as its handler sees it. Input is the type
 * of the task's input, for handlers that know it.
 */
export class Step<Input = unknown> {
  readonly stepId: number;
  readonly taskId: number;
  readonly namespace: string;
  readonly workflow: string;
  readonly version: string;
  /** The step's name in its workflow. */
  readonly name: string;
  readonly handler: string;
  /** 1 for the first attempt. */
  readonly attempt: number;
  /** The task's input. */
  readonly input: Input;
  /** The results of the step's dependencies, by step name. */
  readonly deps: Record<string, unknown>;
  /** The step's static config from the workflow. */
  readonly config: unknown;
  /** The checkpoint the step was claimed with (a previous attempt's), null if none. */
  readonly claimedCheckpoint: unknown;
  /** The latest checkpoint: the claimed one, then what checkpoint() saved. */
  savedCheckpoint: unknown;
  /** The W3C traceparent of the task's trace: make your spans its children. */
  readonly traceparent: string | null;
  /** The W3C tracestate of the task's trace, when its submitter had one. */
  readonly tracestate: string | null;
  /** The step's timeout in milliseconds, null if it has none. */
  readonly timeoutMs: number | null;
  /** The fencing token sent back with every report. */
  readonly fence: Fence;
  /** The registration the step was claimed under. */
  readonly workerId: string;
  /** The claim as received. */
  readonly raw: ClaimedStep;

  /** The worker's bookkeeping, not for handlers: where the step is, and its timeout's timer. */
  state: HeldState = "running";
  timer: NodeJS.Timeout | undefined;

  private readonly claimedAt: number;
  private readonly reporter: StepReporter;
  private readonly stopper = new AbortController();
  private readonly canceller = new AbortController();
  private readonly loser = new AbortController();
  private cancelWhy: string | null = null;
  private preemptWhy: string | null = null;

  constructor(raw: ClaimedStep, workerId: string, reporter: StepReporter, claimedAt = performance.now()) {
    this.raw = raw;
    this.stepId = raw.step_id;
    this.taskId = raw.task_id;
    this.namespace = raw.namespace;
    this.workflow = raw.workflow;
    this.version = raw.version;
    this.name = raw.step;
    this.handler = raw.handler;
    this.attempt = raw.attempt;
    this.input = raw.input as Input;
    this.deps = raw.deps ?? {};
    this.config = raw.config ?? null;
    this.claimedCheckpoint = raw.checkpoint ?? null;
    this.savedCheckpoint = this.claimedCheckpoint;
    this.traceparent = raw.traceparent || null;
    this.tracestate = raw.tracestate || null;
    this.timeoutMs = raw.timeout_ms && raw.timeout_ms > 0 ? raw.timeout_ms : null;
    this.fence = raw.fence;
    this.workerId = workerId;
    this.claimedAt = claimedAt;
    this.reporter = reporter;
  }

  /** Identifies this attempt's claim. */
  get key(): string {
    return fenceKey(this.fence);
  }

  /**
   * Aborted when the handler should stop: its timeout passed, the server
   * said the step is no longer this worker's (cancelled, taken over), the
   * server asked to preempt it, or the worker stopped and its drain time is
   * over. Its reason is a Preempted error for a preemption, else a
   * StaleLease. Pass it to fetch() and the like.
   */
  get signal(): AbortSignal {
    return this.stopper.signal;
  }

  /** True once the step is no longer this attempt's: a cancelled handler's outcome is ignored. */
  get cancelled(): boolean {
    return this.canceller.signal.aborted;
  }

  /** Why the step was cancelled ("timed out", "cancelled or taken over", …), null if it was not. */
  get cancelReason(): string | null {
    return this.cancelWhy;
  }

  /** True once the server said the step is no longer this worker's. */
  get lost(): boolean {
    return this.loser.signal.aborted;
  }

  /** Aborted once cancelled: the worker's reports of the handler (checkpoint, progress) stop. */
  get cancelSignal(): AbortSignal {
    return this.canceller.signal;
  }

  /** Aborted when the step is lost: the worker's reports of its outcome stop. */
  get lostSignal(): AbortSignal {
    return this.loser.signal;
  }

  /** True once the server asked to stop the step for more urgent work (preemptReason says which). */
  get preempted(): boolean {
    return this.preemptWhy !== null;
  }

  /** 'preempted by task N step "X" (priority P)', null if not preempted. */
  get preemptReason(): string | null {
    return this.preemptWhy;
  }

  /** Milliseconds until the step's timeout (never negative), null if it has none. */
  timeLeft(): number | null {
    if (this.timeoutMs === null) return null;
    return Math.max(0, this.claimedAt + this.timeoutMs - performance.now());
  }

  /**
   * Sleep up to ms milliseconds, waking early if the step is cancelled or
   * preempted. Resolves true if it was: `if (await step.wait(1000)) return`.
   */
  wait(ms: number): Promise<boolean> {
    return sleep(ms, this.signal);
  }

  /**
   * Throw Preempted if the server asked to stop the step for more urgent
   * work. Save a checkpoint first if useful: the next run of the step
   * (under the same attempt number) starts from it.
   */
  throwIfPreempted(): void {
    if (this.preemptWhy !== null) throw new Preempted(this.preemptWhy);
  }

  /**
   * Save progress that a later attempt of this step starts from (as its
   * claimedCheckpoint). Fenced: throws StaleLease once this attempt no
   * longer holds the step. Retried while the server is unreachable, up to
   * the worker's lease period.
   */
  async checkpoint(value: unknown): Promise<void> {
    if (JSON.stringify(value) === undefined) throw new TypeError("checkpoint: the value is not JSON");
    this.checkHeld("checkpoint");
    await this.reporter.checkpoint(this, value);
    this.savedCheckpoint = value;
  }

  /**
   * Report how far the handler got: fraction from 0 to 1, and an optional
   * message, shown as the step's progress by the API and the dashboard.
   * Resolves true if the server recorded it. Advisory: if it cannot be
   * delivered it is logged and dropped (false), except that StaleLease is
   * thrown once the step is no longer this attempt's, so the handler can stop.
   */
  async progress(fraction: number, message = ""): Promise<boolean> {
    if (typeof fraction !== "number" || Number.isNaN(fraction) || fraction < 0 || fraction > 1) {
      throw new RangeError(`progress fraction must be a number from 0 to 1, got ${String(fraction)}`);
    }
    if (typeof message !== "string") throw new TypeError(`progress message must be a string, got ${typeof message}`);
    this.checkHeld("progress");
    return this.reporter.progress(this, fraction, message);
  }

  // -- for the worker ----------------------------------------------------------

  /** The worker cancels the step: its handler should stop, its reports are refused. */
  markCancelled(reason: string): void {
    this.cancelWhy ??= reason;
    const err = new StaleLease(409, "stale_lease", `step ${this.stepId} attempt ${this.attempt} is ${this.cancelWhy} on this worker`);
    this.canceller.abort(err);
    this.stopper.abort(err);
  }

  /** The worker loses the step: cancelled, and its outcome is not sent. */
  markLost(reason: string): void {
    this.markCancelled(reason);
    this.loser.abort();
  }

  /** The server asked to stop the step for more urgent work. */
  markPreempted(reason: string): void {
    this.preemptWhy ??= reason;
    this.stopper.abort(new Preempted(this.preemptWhy));
  }

  private checkHeld(what: string): void {
    if (this.cancelled) {
      throw new StaleLease(
        409,
        "stale_lease",
        `step ${this.stepId} attempt ${this.attempt} is ${this.cancelWhy ?? "cancelled"} on this worker: ${what} not sent`,
      );
    }
  }
}
