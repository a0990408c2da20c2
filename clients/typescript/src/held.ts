// The steps a worker holds: claimed and not yet settled, running or with
// their outcome being reported. Every heartbeat lists them.

import type { Logger } from "./log.js";
import type { Step } from "./step.js";
import type { Fence } from "./types.js";

export class HeldSteps {
  private readonly steps = new Map<string, Step>();
  private waiters: (() => void)[] = [];

  constructor(private readonly log: Logger) {}

  get size(): number {
    return this.steps.size;
  }

  get(key: string): Step | undefined {
    return this.steps.get(key);
  }

  add(step: Step): void {
    this.steps.set(step.key, step);
  }

  /** The steps held under the registration wid (every one when wid is undefined). */
  of(wid?: string): Step[] {
    return [...this.steps.values()].filter((s) => wid === undefined || s.workerId === wid);
  }

  /** The fences of the steps held under wid: what its heartbeat lists. */
  fences(wid: string | undefined): Fence[] {
    return wid === undefined ? [] : this.of(wid).map((s) => s.fence);
  }

  /** Nothing more to do for the step: it leaves the heartbeats. */
  settle(step: Step): void {
    if (step.state === "settled") return;
    step.state = "settled";
    clearTimeout(step.timer);
    if (this.steps.get(step.key) === step) this.steps.delete(step.key);
    this.notify();
  }

  /** The step is no longer this worker's: its handler is aborted, its outcome not sent. */
  lose(step: Step, reason: string): void {
    if (step.state === "settled") return;
    step.markLost(reason);
    this.log.warn(`step ${step.stepId} (${step.name}) attempt ${step.attempt} is no longer this worker's (${reason}): its outcome will not be reported`);
    if (step.state === "running") this.settle(step);
    // reporting: the report's retries stop on step.lostSignal and settle it.
  }

  /** Resolves when a step settles or notify() is called, or after ms. */
  changed(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.waiters.push(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }

  notify(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const wake of waiters) wake();
  }
}
