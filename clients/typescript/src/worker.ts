// Worker: registers with a weft server, claims steps, runs their handlers,
// heartbeats every step it holds (heartbeats.ts), and reports each outcome
// (reports.ts). The protocol is docs/remote-workers.md; what the worker
// guarantees on its side:
//
// - every request is retried on connection errors, timeouts, 5xx and 429
//   (honouring Retry-After) for at least the lease period; a 4xx is final at
//   once, and a complete or fail refused with one is reported as a failed
//   attempt instead (never dropped, which would have the step run again);
// - every heartbeat lists every step held, including those whose outcome is
//   still being reported, and says how many slots are free;
// - a step whose timeout passes is reported failed ("step timed out after
//   …") and its handler's late outcome ignored;
// - a worker the server no longer knows registers again; refused
//   credentials stop the worker with Unauthorized;
// - stop() stops claiming, waits for running handlers up to the drain
//   timeout, and deregisters.

import { APIError, Interrupted, Permanent, ServerUnavailable, Snooze, StaleLease, Unauthorized, WorkerLost, authError, describe } from "./errors.js";
import { drive, runCall, type DurableFunction } from "./function.js";
import { Heartbeats } from "./heartbeats.js";
import { HeldSteps } from "./held.js";
import { defaultLogger, type Logger } from "./log.js";
import { completion, failure, formatDuration, type Outcome } from "./outcomes.js";
import { Reports } from "./reports.js";
import { Step } from "./step.js";
import { Transport, sleep } from "./transport.js";
import type { ClaimReply, Fence, RegisterWorker, WorkerRegistered } from "./types.js";

/** A handler: gets the step, returns its JSON result (or throws). */
export type Handler<Input = any> = (step: Step<Input>) => unknown;

export interface WorkerOptions {
  /** An API key or JWT with workers:connect. */
  token?: string;
  /** The worker's name (letters, digits, _ . -); its id derives from it. Default "typescript". */
  name?: string;
  /** The namespaces it serves (default: all). */
  namespaces?: string[];
  /** Handlers run at once (default 4). */
  concurrency?: number;
  /** The longest claim long poll, in ms (default 20000; the server caps it). */
  waitMs?: number;
  /** How long each HTTP attempt may take, in ms (default 30000). */
  timeoutMs?: number;
  /** On stop, how long to wait for running handlers, in ms (default 30000). */
  drainTimeoutMs?: number;
  /** How long the first registration is retried while the server is unreachable, in ms (default 60000; null: until stopped). */
  registerTimeoutMs?: number | null;
  /** Heartbeat at least this often, in ms (default: as the server says). */
  heartbeatIntervalMs?: number;
  /** Where the worker says what it does (default: warnings and errors to stderr). */
  logger?: Logger;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
}

export class Worker {
  readonly name: string;
  readonly namespaces: string[];
  readonly concurrency: number;
  readonly handlers = new Map<string, Handler>();
  private readonly functions = new Map<string, DurableFunction>();
  /** The id of the current registration, undefined before the first. */
  workerId: string | undefined;
  /** The lease period, from the registration (30 s until then). */
  leaseTtlMs = 30_000;
  heartbeatIntervalMs: number;

  private readonly waitMs: number;
  private readonly timeoutMs: number;
  private readonly drainTimeoutMs: number;
  private readonly registerTimeoutMs: number | null;
  private readonly heartbeatOverride: number | undefined;
  private readonly log: Logger;
  private readonly t: Transport;
  private readonly steps: HeldSteps;
  private readonly reports: Reports;
  private readonly heartbeats: Heartbeats;
  private maxWaitMs: number | undefined;
  private readonly stopping = new AbortController(); // stop claiming, drain
  private noDrain = false;
  private registering: Promise<unknown> | undefined;
  private fatal: Error | undefined;
  private running = false;

  constructor(url: string, options: WorkerOptions = {}) {
    const concurrency = options.concurrency ?? 4;
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new RangeError(`concurrency must be at least 1, got ${concurrency}`);
    this.name = options.name ?? "typescript";
    this.namespaces = [...(options.namespaces ?? [])];
    this.concurrency = concurrency;
    this.waitMs = options.waitMs ?? 20_000;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.drainTimeoutMs = options.drainTimeoutMs ?? 30_000;
    this.registerTimeoutMs = options.registerTimeoutMs === undefined ? 60_000 : options.registerTimeoutMs;
    this.heartbeatOverride = options.heartbeatIntervalMs;
    this.heartbeatIntervalMs = options.heartbeatIntervalMs ?? 5000;
    this.log = options.logger ?? defaultLogger;
    this.t = new Transport(url, { token: options.token, timeoutMs: this.timeoutMs, userAgent: "weft-worker-typescript", fetch: options.fetch });
    this.steps = new HeldSteps(this.log);
    const common = {
      transport: this.t,
      log: this.log,
      held: this.steps,
      leaseTtlMs: () => this.leaseTtlMs,
      workerLost: (oldId: string, err: APIError) => this.workerLostQuietly(oldId, err),
    };
    this.reports = new Reports(common);
    this.heartbeats = new Heartbeats({
      ...common,
      concurrency,
      namespaces: this.namespaces,
      handlers: () => this.handlerNames(),
      workerId: () => this.workerId as string,
      intervalMs: () => this.heartbeatIntervalMs,
      stopping: this.stopping.signal,
      refused: (err) => {
        this.fatal = authError(err, "heartbeat");
        this.log.error(`${this.fatal.message}: stopping`);
        this.stop();
      },
    });
  }

  /**
   * Serve the durable function whose workflow's function step (type
   * function) has handler `name`: fn(f, input) => JSON result, whose calls
   * through f (step, go, sleep, waitSignal, child) are steps of the task,
   * recorded by the server. Returns the worker, to chain.
   */
  function<I = unknown, R = unknown>(name: string, fn: DurableFunction<I, R>): this {
    this.functions.set(name, fn as DurableFunction);
    return this.handle(name, () => {
      throw new Error("a durable function runs through its function step");
    });
  }

  /** Serve the handler `name` with fn(step) => JSON result. Returns the worker, to chain. */
  handle<Input = any>(name: string, fn: Handler<Input>): this {
    this.handlers.set(name, fn as Handler);
    return this;
  }

  /** The fences of every step the worker holds (what a heartbeat lists). */
  held(): Fence[] {
    return this.steps.fences(this.workerId);
  }

  /**
   * Register and work until stop() (or SIGINT/SIGTERM, unless signals is
   * false), then drain running handlers (up to drainTimeoutMs) and
   * deregister. Rejects with Unauthorized if the server refuses the
   * credentials, APIError if it refuses the registration or claims for
   * another reason, ServerUnavailable if the first registration cannot
   * reach it.
   */
  async run(options: { signals?: boolean } = {}): Promise<void> {
    if (this.running) throw new Error("the worker is already running");
    this.running = true;
    const restore = options.signals === false ? undefined : this.installSignals();
    try {
      try {
        await this.register();
      } catch (err) {
        if (err instanceof Interrupted) return;
        throw err;
      }
      const hbStop = new AbortController();
      const heartbeats = this.heartbeats.run(hbStop.signal);
      try {
        await this.claimLoop();
      } finally {
        await this.drain();
        hbStop.abort();
        await heartbeats;
        await this.deregister();
      }
      if (this.fatal) throw this.fatal;
    } finally {
      restore?.();
    }
  }

  /**
   * Stop claiming (a claim's long poll is cut short); run() then waits for
   * running handlers (unless drain is false), reports their outcomes, and
   * deregisters.
   */
  stop(options: { drain?: boolean } = {}): void {
    if (options.drain === false) this.noDrain = true;
    this.stopping.abort();
    this.steps.notify();
  }

  /** Register, retrying while the server is unreachable for windowMs (default registerTimeoutMs). */
  async register(windowMs?: number): Promise<WorkerRegistered> {
    if (this.handlers.size === 0) throw new Error("register at least one handler with worker.handle(name, fn)");
    const body: RegisterWorker = { name: this.name, namespaces: this.namespaces, handlers: this.handlerNames() };
    let reg: WorkerRegistered;
    try {
      reg = await this.t.call<WorkerRegistered>("POST", "/v1/workers", body, {
        windowMs: windowMs ?? this.registerTimeoutMs ?? Infinity,
        what: "register",
        signal: this.stopping.signal,
        log: this.log,
      });
    } catch (err) {
      throw err instanceof Unauthorized ? authError(err, "register") : err;
    }
    this.leaseTtlMs = reg.lease_ttl_ms;
    this.heartbeatIntervalMs = Math.min(reg.heartbeat_interval_ms, this.heartbeatOverride ?? Infinity);
    this.maxWaitMs = reg.max_wait_ms;
    this.workerId = reg.worker_id; // only once registered: the old id stays until then
    this.log.info(
      `weft worker ${reg.worker_id} registered: handlers ${body.handlers.join(",")}, namespaces ${this.namespaces.join(",") || "(all)"}, ` +
        `lease ${formatDuration(this.leaseTtlMs)}, heartbeat every ${formatDuration(this.heartbeatIntervalMs)}`,
    );
    return reg;
  }

  // -- claiming and running -----------------------------------------------------

  private async claimLoop(): Promise<void> {
    while (!this.stopping.signal.aborted) {
      try {
        await this.claim();
      } catch (err) {
        if (err instanceof Interrupted) break;
        if (err instanceof Unauthorized) {
          this.fatal = authError(err, "claim");
          this.log.error(`${this.fatal.message}: stopping`);
          break;
        }
        if (err instanceof APIError) {
          this.fatal = err;
          this.log.error(`the server refused the claim (${err}): stopping`);
          break;
        }
        this.log.error(err instanceof ServerUnavailable ? `cannot claim: ${err.message}; still trying` : `claim failed: ${describe(err)}`);
        await sleep(1000, this.stopping.signal);
      }
    }
  }

  /** Claim up to the free slots (waiting for work up to waitMs) and start their handlers. */
  private async claim(): Promise<void> {
    while (this.steps.size >= this.concurrency && !this.stopping.signal.aborted) await this.steps.changed(500);
    if (this.stopping.signal.aborted) return;
    const wid = this.workerId as string;
    const waitMs = Math.max(0, Math.min(this.waitMs, this.maxWaitMs ?? Infinity));
    const body = {
      handlers: this.handlerNames(),
      namespaces: this.namespaces,
      max: Math.min(this.concurrency - this.steps.size, 100),
      wait_ms: Math.floor(waitMs),
    };
    let reply: ClaimReply;
    try {
      reply = await this.t.call<ClaimReply>("POST", `/v1/workers/${wid}/claim`, body, {
        windowMs: this.leaseTtlMs,
        what: "claim",
        signal: this.stopping.signal,
        timeoutMs: this.timeoutMs + waitMs,
        log: this.log,
      });
    } catch (err) {
      if (err instanceof WorkerLost) return this.workerLost(wid, err);
      throw err;
    }
    const now = performance.now();
    for (const raw of reply.steps ?? []) this.start(new Step(raw, wid, this.reports, now));
  }

  private start(step: Step): void {
    const timeout = step.timeoutMs === null ? "" : ` (timeout ${formatDuration(step.timeoutMs)})`;
    this.log.info(`step ${step.stepId} (${step.namespace}/${step.workflow} ${step.name}) attempt ${step.attempt} claimed${timeout}`);
    this.steps.add(step);
    if (step.timeoutMs !== null) step.timer = setTimeout(() => void this.timedOut(step), step.timeoutMs);
    void this.execute(step);
  }

  private async execute(step: Step): Promise<void> {
    let outcome: Outcome;
    try {
      const durable = this.functions.get(step.handler);
      const fn = this.handlers.get(step.handler);
      if (fn === undefined) throw new Error(`this worker has no handler ${JSON.stringify(step.handler)}`);
      if (durable !== undefined) {
        outcome = await functionOutcome(durable, step);
      } else {
        outcome = completion(await fn(step));
      }
    } catch (err) {
      if (step.preempted) {
        // Stopped as asked (whatever it threw): back to the queue.
        this.log.info(`step ${step.stepId} (${step.name}) attempt ${step.attempt} stopped: ${step.preemptReason}`);
        outcome = { kind: "fail", body: { error: step.preemptReason ?? "preempted", preempted: true } };
      } else if (err instanceof Snooze && !step.cancelled) {
        // Not done yet, and no failure: logged as such, without a stack.
        outcome = failure(err);
        const ms = outcome.kind === "fail" ? (outcome.body.snooze_ms ?? 0) : 0;
        this.log.info(`step ${step.stepId} (${step.name}) attempt ${step.attempt} snoozed for ${formatDuration(ms)}: ${err.message}`);
      } else {
        if (!step.cancelled) {
          const stack = err instanceof Error && err.stack ? err.stack : describe(err);
          this.log.warn(`step ${step.stepId} (${step.name}) attempt ${step.attempt}: handler threw ${stack}`);
        }
        outcome = failure(err);
      }
    }
    if (step.state !== "running") {
      // Timed out or lost: the outcome reported (if any) is not this one.
      this.log.info(
        `step ${step.stepId} attempt ${step.attempt}: the handler returned after the step was ${step.cancelReason ?? "settled"}: its outcome is ignored`,
      );
      return;
    }
    step.state = "reporting";
    clearTimeout(step.timer);
    await this.reports.outcome(step, outcome);
  }

  private async timedOut(step: Step): Promise<void> {
    if (step.state !== "running" || step.timeoutMs === null) return;
    step.state = "reporting";
    step.markCancelled("timed out");
    const error = `step timed out after ${formatDuration(step.timeoutMs)}`;
    this.log.warn(
      `step ${step.stepId} (${step.name}) attempt ${step.attempt}: ${error}: reporting the failure; the handler's late result will be ignored`,
    );
    await this.reports.outcome(step, { kind: "fail", body: { error } });
  }

  // -- registering again and stopping ----------------------------------------------

  /** The server does not know oldId (declared dead, deregistered): forget its steps and register again, once. */
  private async workerLost(oldId: string, err: APIError): Promise<void> {
    while (this.registering) await this.registering.catch(() => undefined);
    if (this.workerId !== oldId) return; // registered again already
    const held = this.steps.of(oldId);
    for (const step of held) this.steps.lose(step, "reclaimed: the worker was declared dead");
    this.log.warn(`weft worker ${oldId} is unknown to the server (${err.message}): its ${held.length} steps were reclaimed; registering again`);
    if (this.stopping.signal.aborted) return;
    this.registering = this.register(this.leaseTtlMs);
    try {
      await this.registering;
    } finally {
      this.registering = undefined;
    }
  }

  private async workerLostQuietly(oldId: string, err: APIError): Promise<void> {
    try {
      await this.workerLost(oldId, err);
    } catch (e) {
      this.log.warn(`registering again failed: ${describe(e)}`);
    }
  }

  private async drain(): Promise<void> {
    const deadline = performance.now() + this.drainTimeoutMs;
    if (this.steps.size > 0) this.log.info(`stopping: waiting up to ${formatDuration(this.drainTimeoutMs)} for ${this.steps.size} running steps`);
    while (this.steps.size > 0 && !this.noDrain) {
      const left = deadline - performance.now();
      if (left <= 0) break;
      await this.steps.changed(Math.min(left, 500));
    }
    if (this.steps.size === 0) return;
    this.log.warn(`stopping with ${this.steps.size} steps unfinished: the server reclaims them when the worker deregisters`);
    for (const step of this.steps.of()) this.steps.lose(step, "the worker stopped before it finished");
  }

  private async deregister(): Promise<void> {
    const wid = this.workerId;
    if (wid === undefined) return;
    try {
      await this.t.call("DELETE", `/v1/workers/${wid}`, undefined, { windowMs: Math.min(this.leaseTtlMs, 10_000), what: "deregister", log: this.log });
      this.log.info(`weft worker ${wid} deregistered`);
    } catch (err) {
      if (err instanceof WorkerLost || err instanceof StaleLease) return;
      this.log.warn(`deregister ${wid} failed (${describe(err)}): the server reclaims its steps when its lease lapses`);
    }
  }

  private installSignals(): () => void {
    const onSignal = (signal: NodeJS.Signals) => {
      if (this.stopping.signal.aborted) {
        this.log.warn(`${signal} again: stopping without waiting for running handlers`);
        this.stop({ drain: false });
      } else {
        this.log.info(`${signal}: stopping (again to stop without waiting for running handlers)`);
        this.stop();
      }
    };
    process.on("SIGINT", onSignal);
    process.on("SIGTERM", onSignal);
    return () => {
      process.off("SIGINT", onSignal);
      process.off("SIGTERM", onSignal);
    };
  }

  private handlerNames(): string[] {
    return [...this.handlers.keys()].sort();
  }
}

/** The outcome of a durable function's step: new calls, or a result. */
async function functionOutcome(fn: DurableFunction, step: Step): Promise<Outcome> {
  if (step.raw.kind === "call") return completion(await runCall(fn, step));
  if (step.raw.kind !== "function") {
    throw new Permanent(`step "${step.name}" is not a durable function's (its workflow's step must be of type function)`);
  }
  const driven = await drive(fn, step);
  if (driven.kind === "calls") return { kind: "calls", body: { calls: driven.calls } };
  return completion(driven.value);
}
