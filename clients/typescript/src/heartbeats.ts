// A worker's heartbeats: every step it holds, how many more it could run,
// and what the server answers (steps lost, steps to preempt).

import { APIError, Interrupted, ServerUnavailable, Unauthorized, WorkerLost, describe } from "./errors.js";
import type { HeldSteps } from "./held.js";
import type { Logger } from "./log.js";
import { fenceKey } from "./step.js";
import { sleep, type Transport } from "./transport.js";
import type { Heartbeat, HeartbeatReply, Preempt } from "./types.js";

/** What the heartbeats need of their worker. */
export interface HeartbeatContext {
  transport: Transport;
  log: Logger;
  held: HeldSteps;
  concurrency: number;
  namespaces: string[];
  handlers(): string[];
  workerId(): string;
  leaseTtlMs(): number;
  intervalMs(): number;
  /** Aborted when the worker stops claiming: it has no room to make any more. */
  stopping: AbortSignal;
  /** The server does not know the worker oldId any more: register again (errors logged). */
  workerLost(oldId: string, err: APIError): Promise<void>;
  /** The server refused the credentials: stop the worker with err. */
  refused(err: Unauthorized): void;
}

export class Heartbeats {
  private loadUnsupported = false; // an older server refuses "free" in heartbeats

  constructor(private readonly w: HeartbeatContext) {}

  /** Beat every interval until stop is aborted. */
  async run(stop: AbortSignal): Promise<void> {
    while (!(await sleep(this.w.intervalMs(), stop))) {
      const wid = this.w.workerId();
      let reply: HeartbeatReply;
      try {
        reply = await this.beat(wid, stop);
      } catch (err) {
        if (err instanceof Interrupted) return;
        if (err instanceof WorkerLost) {
          await this.w.workerLost(wid, err);
        } else if (err instanceof Unauthorized) {
          this.w.refused(err);
        } else if (err instanceof ServerUnavailable) {
          this.w.log.error(
            `no heartbeat reached the server for ${Math.round(err.elapsedMs / 1000)}s (${describe(err.lastError)}): ` +
              `it has presumably declared this worker dead and reclaimed its ${this.w.held.fences(wid).length} steps`,
          );
        } else {
          this.w.log.error(`heartbeat ${err instanceof APIError ? "refused" : "failed"}: ${describe(err)}`);
        }
        continue;
      }
      const lost = new Set((reply?.lost ?? []).map(fenceKey));
      for (const step of this.w.held.of(wid)) if (lost.has(step.key)) this.w.held.lose(step, "cancelled or taken over");
      this.preempt(wid, reply?.preempt ?? []);
    }
  }

  /** One heartbeat; an older server that refuses the fields of preemption gets plain ones from then on. */
  private async beat(wid: string, stop: AbortSignal): Promise<HeartbeatReply> {
    const send = () =>
      this.w.transport.call<HeartbeatReply>("POST", `/v1/workers/${wid}/heartbeat`, () => this.body(wid), {
        windowMs: this.w.leaseTtlMs(),
        what: "heartbeat",
        signal: stop,
        log: this.w.log,
      });
    try {
      return await send();
    } catch (err) {
      const older = err instanceof APIError && err.status === 400 && err.code === "unknown_field";
      if (this.loadUnsupported || !older || !["free", "handlers", "namespaces"].includes(err.field ?? "")) throw err;
    }
    this.loadUnsupported = true;
    this.w.log.warn("the server does not take free slots in heartbeats: this worker's steps are not preempted");
    return send();
  }

  /** Every step held and, for preemption, how many more the worker could run now. */
  private body(wid: string): Heartbeat {
    const body: Heartbeat = { steps: this.w.held.fences(wid) };
    // A stopping worker claims nothing more: no room to make.
    if (!this.loadUnsupported && !this.w.stopping.aborted) {
      body.free = Math.max(0, this.w.concurrency - this.w.held.size);
      body.handlers = this.w.handlers();
      if (this.w.namespaces.length > 0) body.namespaces = this.w.namespaces;
    }
    return body;
  }

  /** Tell the handlers of the steps the server asked to stop. */
  private preempt(wid: string, asked: Preempt[]): void {
    for (const p of asked) {
      const step = this.w.held.get(fenceKey(p.fence));
      if (step === undefined || step.workerId !== wid || step.state !== "running" || step.preempted) continue;
      step.markPreempted(p.reason || "preempted by a step of higher priority");
      this.w.log.info(`step ${step.stepId} (${step.name}) attempt ${step.attempt}: ${step.preemptReason}: asking its handler to stop`);
    }
  }
}
