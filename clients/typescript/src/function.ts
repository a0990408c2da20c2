// Durable functions: a workflow written as plain TypeScript whose calls are
// steps of its task, recorded by the server (docs/functions.md).
//
//   worker.function("shop.checkout", async (fn, order) => {
//     const charge = await fn.step("charge", () => chargeCard(order), { maxAttempts: 5 });
//     await fn.sleep(3_600_000);
//     const approval = await fn.waitSignal("approval", { timeoutMs: 86_400_000 });
//     return { charge, approval };
//   });
//
// The task's function step runs the function from the top each time: a call
// that has ended returns its recorded result without running again, and the
// first new calls become steps of the task that the function step waits for.
// A run stops where it waits for a call that has not ended: that await never
// settles, and the run is dropped. A step call's code runs where its step is
// claimed, by running the function up to the call. The function must make
// the same calls in the same order each time.

import { Permanent, Snooze } from "./errors.js";
import type { Step } from "./step.js";
import type { Call, RecordedCall } from "./types.js";

/** A durable function: gets its calls and the task's input, returns its JSON result. */
export type DurableFunction<I = unknown, R = unknown> = (fn: FunctionContext, input: I) => R | Promise<R>;

/** A call whose step failed for good (or a signal wait that timed out). One the function lets through fails its task at once. */
export class CallError extends Error {
  constructor(
    readonly call: string,
    readonly reason: string,
  ) {
    super(`call "${call}" failed: ${reason}`);
    this.name = "CallError";
  }
}

/** Options of a step call. */
export interface CallOptions {
  maxAttempts?: number;
  /** Bounds each attempt, in ms. */
  timeoutMs?: number;
  priority?: number;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$/;

/** How a run ended early. */
type Stop = { kind: "suspended" } | { kind: "failed"; error: unknown } | { kind: "reached"; value?: unknown; error?: unknown; threw: boolean };

/** A call made with go(); get() resolves to its result. */
export class Future<T = unknown> {
  constructor(private readonly wait: () => Promise<T>) {}
  get(): Promise<T> {
    return this.wait();
  }
}

/** What a durable function gets: its calls, and the task's id and input. */
export class FunctionContext {
  readonly taskId: number;
  /** New calls this run made, for the server. */
  readonly issued: Call[] = [];
  private readonly journal: RecordedCall[];
  private next = 0;
  /** How many calls this run made. */
  get made(): number {
    return this.next;
  }
  private readonly used = new Map<string, number>();
  private settle!: (s: Stop) => void;
  /** Call mode: the target call was reached; how the run ends is its outcome alone. */
  private reached = false;
  readonly stopped: Promise<Stop>;

  constructor(
    step: Step,
    private readonly target: string | null = null,
  ) {
    this.taskId = step.taskId;
    this.journal = step.raw.calls ?? [];
    this.stopped = new Promise<Stop>((resolve) => (this.settle = resolve));
  }

  /** Run fn as a step named name; resolves to its result, recorded once it succeeded. */
  step<T>(name: string, fn: () => T | Promise<T>, options: CallOptions = {}): Promise<T> {
    return this.go(name, fn, options).get();
  }

  /** step() without waiting: calls made with go() run in parallel. */
  go<T>(name: string, fn: () => T | Promise<T>, options: CallOptions = {}): Future<T> {
    const call: Call = { name, kind: "step" };
    if (options.maxAttempts !== undefined) call.max_attempts = options.maxAttempts;
    if (options.timeoutMs !== undefined) call.timeout_ms = Math.round(options.timeoutMs);
    if (options.priority !== undefined) call.priority = options.priority;
    const wait = this.call(call, fn);
    return new Future(wait as () => Promise<T>);
  }

  /** Wait durably for ms milliseconds, holding no slot. */
  async sleep(ms: number): Promise<void> {
    if (!(ms > 0)) throw new RangeError(`a sleep lasts more than 0 ms, got ${ms}`);
    await this.call({ name: "sleep", kind: "sleep", sleep_ms: Math.max(1, Math.round(ms)) })();
  }

  /** Wait durably for the signal name and resolve to its payload; timeoutMs bounds the wait (past it, CallError). */
  async waitSignal(name: string, options: { timeoutMs?: number } = {}): Promise<unknown> {
    const call: Call = { name, kind: "signal", signal: name };
    if (options.timeoutMs !== undefined) call.timeout_ms = Math.round(options.timeoutMs);
    const result = (await this.call(call)()) as { payload?: unknown } | null;
    return result && typeof result === "object" ? result.payload : result;
  }

  /** Start a child task of workflow ("namespace/name[@version]") and resolve to its result. */
  async child(workflow: string, input: unknown = {}): Promise<unknown> {
    const name = (workflow.split("/").pop() ?? "").split("@")[0] ?? "";
    return this.call({ name, kind: "child", workflow, input })();
  }

  /** Ends the run with s, unless the call a call step runs was reached. */
  private stop(s: Stop): void {
    if (!this.reached || s.kind === "reached") this.settle(s);
  }

  /** Makes a call and returns how to wait for it. */
  private call(call: Call, run?: () => unknown): () => Promise<unknown> {
    const never = () => new Promise<never>(() => {});
    if (!NAME.test(call.name)) {
      this.stop({ kind: "failed", error: new Permanent(`call name ${JSON.stringify(call.name)}: use letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128 bytes`) });
      return never;
    }
    const n = this.used.get(call.name) ?? 0;
    this.used.set(call.name, n + 1);
    if (n > 0) call.name = `${call.name}[${n + 1}]`;
    const name = call.name;
    const pos = this.next++;
    if (pos >= this.journal.length) {
      this.issued.push(call);
      return () => {
        if (this.target !== null) {
          this.stop({ kind: "failed", error: new Permanent(`the function waited for call "${name}" before it made call "${this.target}"`) });
        } else {
          this.stop({ kind: "suspended" });
        }
        return never();
      };
    }
    const rec = this.journal[pos] as RecordedCall;
    if (rec.name !== name || rec.kind !== call.kind) {
      this.stop({
        kind: "failed",
        error: new Permanent(
          `non-determinism: call ${pos + 1} is ${call.kind} "${name}", but the task recorded ${rec.kind} "${rec.name}" there (change the function under a new version)`,
        ),
      });
      return never;
    }
    if (this.target !== null && name === this.target && run !== undefined) {
      this.reached = true;
      Promise.resolve()
        .then(run)
        .then(
          (value) => this.stop({ kind: "reached", value, threw: false }),
          (error) => this.stop({ kind: "reached", error, threw: true }),
        );
      return never;
    }
    return () => {
      if (rec.ended) return rec.ok ? Promise.resolve(rec.result ?? null) : Promise.reject(new CallError(name, rec.error || "failed"));
      if (this.target !== null) {
        this.stop({ kind: "failed", error: new Permanent(`the function waited for call "${name}" before it made call "${this.target}"`) });
      } else {
        this.stop({ kind: "suspended" });
      }
      return never();
    };
  }
}

/** What a run of a function step reports: new calls, or the function's result. */
export type Driven = { kind: "calls"; calls: Call[] } | { kind: "result"; value: unknown };

/** Run a function step: the function over the recorded calls. Throws what fails the attempt. */
export async function drive(fn: DurableFunction, step: Step): Promise<Driven> {
  const f = new FunctionContext(step);
  const returned = Promise.resolve()
    .then(() => fn(f, step.input))
    .then(
      (value) => ({ kind: "returned" as const, value }),
      (error: unknown) => ({ kind: "threw" as const, error }),
    );
  const end = await Promise.race([returned, f.stopped]);
  // Calls made in the same turn as the one that stopped the run go too.
  await new Promise((r) => setImmediate(r));
  switch (end.kind) {
    case "failed":
      throw end.error;
    case "threw":
      if (end.error instanceof CallError) throw new Permanent(end.error.message);
      throw end.error;
  }
  if (f.issued.length > 0) return { kind: "calls", calls: f.issued };
  if (end.kind === "suspended") throw new Snooze(1000, "the function waits for a call that has not ended");
  const journal = step.raw.calls ?? [];
  const made = f.made;
  if (end.kind === "returned" && made < journal.length) {
    const rec = journal[made] as RecordedCall;
    throw new Permanent(
      `non-determinism: the function returned after ${made} calls, but the task recorded ${journal.length} (the next is ${rec.kind} "${rec.name}")`,
    );
  }
  return { kind: "result", value: end.kind === "returned" ? end.value : null };
}

/** Run a step call's code: the function up to the call. Resolves to its result or throws its error. */
export async function runCall(fn: DurableFunction, step: Step): Promise<unknown> {
  const f = new FunctionContext(step, step.name);
  const returned = Promise.resolve()
    .then(() => fn(f, step.input))
    .then(
      () => ({ kind: "returned" as const }),
      (error: unknown) => ({ kind: "threw" as const, error }),
    );
  const end = await Promise.race([returned, f.stopped]);
  switch (end.kind) {
    case "reached":
      if (end.threw) throw end.error;
      return end.value;
    case "failed":
      throw end.error;
    case "threw":
      throw new Permanent(`the function, replayed to run call "${step.name}", failed before it: ${String(end.error)}`);
  }
  throw new Permanent(`the function, replayed, did not make call "${step.name}" (change the function under a new version)`);
}
