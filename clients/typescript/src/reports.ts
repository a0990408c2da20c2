// A worker's reports of its steps: each outcome (complete or fail), and the
// checkpoints and progress of running handlers.

import { APIError, Interrupted, ServerUnavailable, StaleLease, WorkerLost, describe } from "./errors.js";
import type { HeldSteps } from "./held.js";
import type { Logger } from "./log.js";
import { refusedForGood, refusedOutcome, type Outcome } from "./outcomes.js";
import type { Step, StepReporter } from "./step.js";
import type { Transport } from "./transport.js";
import type { Reported } from "./types.js";

/** What the reports need of their worker. */
export interface ReportContext {
  transport: Transport;
  log: Logger;
  held: HeldSteps;
  /** How long to retry a report: the lease period. */
  leaseTtlMs(): number;
  /** The server does not know the worker oldId any more: register again (errors logged). */
  workerLost(oldId: string, err: APIError): Promise<void>;
}

export class Reports implements StepReporter {
  private progressUnsupported = false;

  constructor(private readonly w: ReportContext) {}

  /**
   * Send a step's outcome, retrying, then settle the step. An outcome the
   * server refuses with a 4xx (a result too large, say) is reported as a
   * failed attempt instead, so that the step ends rather than run again.
   */
  async outcome(step: Step, outcome: Outcome): Promise<void> {
    const log = this.w.log;
    let what = `${outcome.kind} of step ${step.stepId} attempt ${step.attempt}`;
    try {
      if (step.lost) return;
      try {
        await this.send(step, outcome, what);
      } catch (err) {
        if (!refusedForGood(err)) throw err;
        const fallback = refusedOutcome(outcome, err);
        log.error(`${what} refused (${err}): reporting the attempt failed instead${fallback.permanent ? " (permanently)" : ""}`);
        what = `fail of step ${step.stepId} attempt ${step.attempt} (instead of the refused ${outcome.kind})`;
        await this.send(step, { kind: "fail", body: fallback }, what);
      }
    } catch (err) {
      if (err instanceof StaleLease) {
        log.warn(`${what} refused: the step is no longer held by this worker (cancelled, timed out or taken over): dropped (${err.message})`);
      } else if (err instanceof WorkerLost) {
        log.warn(`${what} refused: the server declared this worker dead: the step was reclaimed`);
        await this.w.workerLost(step.workerId, err);
      } else if (err instanceof Interrupted) {
        log.warn(`${what} not sent: the step is no longer this worker's (${step.cancelReason ?? "lost"})`);
      } else if (err instanceof ServerUnavailable) {
        log.error(
          `${what}: GAVE UP after ${Math.round(err.elapsedMs / 1000)}s without reaching the server (${describe(err.lastError)}). ` +
            "The step is no longer listed in heartbeats: the server will reclaim it and run it again.",
        );
      } else {
        log.error(`${what} failed (${describe(err)}): dropped; the server will reclaim the step`);
      }
    } finally {
      this.w.held.settle(step);
    }
  }

  async checkpoint(step: Step, value: unknown): Promise<void> {
    await this.fenced(step, "checkpoint", { fence: step.fence, checkpoint: value });
  }

  async progress(step: Step, fraction: number, message: string): Promise<boolean> {
    if (this.progressUnsupported) return false;
    try {
      await this.fenced(step, "progress", { fence: step.fence, fraction, message });
      return true;
    } catch (err) {
      if (err instanceof StaleLease) throw err;
      // A server older than the progress endpoint: its router answers "route POST /v1/…: not found".
      if (err instanceof APIError && (err.status === 404 || err.status === 405) && /^(no )?route /.test(err.message)) {
        this.progressUnsupported = true;
        this.w.log.warn("the server has no progress endpoint (POST /v1/workers/{id}/progress): progress is not reported");
      } else {
        const how = err instanceof APIError ? "refused" : "dropped";
        this.w.log.warn(`progress of step ${step.stepId} attempt ${step.attempt} ${how}: ${describe(err)}`);
      }
      return false;
    }
  }

  private async send(step: Step, outcome: Outcome, what: string): Promise<void> {
    const reply = await this.w.transport.call<Reported | undefined>(
      "POST",
      `/v1/workers/${step.workerId}/${outcome.kind}`,
      { ...outcome.body, fence: step.fence },
      { windowMs: this.w.leaseTtlMs(), what, signal: step.lostSignal, log: this.w.log },
    );
    const where = `step ${step.stepId} (${step.name}) attempt ${step.attempt}`;
    if (reply?.error && outcome.kind === "complete") {
      // Recorded, but not as a success (a result that cannot be stored fails the step for good).
      this.w.log.error(`${where}: complete recorded as ${reply.state}: ${reply.error}`);
    } else {
      this.w.log.info(`${where}: ${outcome.kind} recorded: ${reply?.state ?? "ok"}`);
    }
  }

  /** A report of a running handler: StaleLease once the step is no longer this attempt's. */
  private async fenced(step: Step, kind: "checkpoint" | "progress", body: object): Promise<void> {
    const what = `${kind} of step ${step.stepId} attempt ${step.attempt}`;
    try {
      await this.w.transport.call("POST", `/v1/workers/${step.workerId}/${kind}`, body, {
        windowMs: this.w.leaseTtlMs(),
        what,
        signal: step.cancelSignal,
        log: this.w.log,
      });
    } catch (err) {
      if (err instanceof StaleLease || err instanceof WorkerLost) {
        this.w.held.lose(step, `${kind} refused: ${err.code}`);
        throw err instanceof StaleLease ? err : new StaleLease(err.status, "stale_lease", err.message);
      }
      if (err instanceof Interrupted) {
        throw new StaleLease(409, "stale_lease", `step ${step.stepId} attempt ${step.attempt} is ${step.cancelReason ?? "cancelled"}: ${kind} not sent`);
      }
      throw err;
    }
  }
}
