// Preemption of the worker's steps: a full worker is asked to stop a
// preemptible step for a step of higher priority; a worker with a free slot
// is not; a result returned anyway completes the step.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Preempted, type Handler } from "../src/index.js";
import { serverEnv, type Ctx } from "../testing/harness.js";
import { stepNamed, waitFor } from "../testing/weftserver.js";

const env = serverEnv();

async function register(ctx: Ctx, ns: string): Promise<void> {
  await ctx.server.registerWorkflow(
    `namespace: ${ns}\nname: crunch\nversion: "1"\nsteps:\n  - name: crunch\n    handler: ts.crunch\n    priority: -1\n    preemptible: true\n`,
  );
  await ctx.server.registerWorkflow(`namespace: ${ns}\nname: page\nversion: "1"\nsteps:\n  - name: alert\n    handler: ts.alert\n    priority: 5\n`);
}

/**
 * A preemptible handler: saves a checkpoint, then waits until it is
 * preempted (or released); a rerun resumes from the checkpoint.
 */
function crunch(seen: unknown[], released: () => boolean): Handler {
  return async (step) => {
    seen.push(["start", step.attempt, step.claimedCheckpoint]);
    if (step.claimedCheckpoint) return { resumed: step.claimedCheckpoint };
    await step.checkpoint({ row: 40 });
    while (!released() && !(await step.wait(100)));
    seen.push(["woke", step.preempted, step.preemptReason]);
    step.throwIfPreempted();
    return { released: true };
  };
}

const alert: Handler = () => ({ paged: true });

describe("preemption", () => {
  it(
    "stops a full worker's preemptible step for a step of higher priority",
    env.run(async (ctx) => {
      await register(ctx, "pre");
      const seen: unknown[] = [];
      let released = false;
      ctx.cleanup(() => (released = true));
      await ctx.startWorker("pre", { "ts.crunch": crunch(seen, () => released), "ts.alert": alert }, { concurrency: 1 });
      const low = await ctx.server.submit("pre/crunch");
      await waitFor(async () => stepNamed(await ctx.server.task(low), "crunch").checkpoint, 10_000, "crunch to save its checkpoint");
      const high = await ctx.server.submit("pre/page");
      assert.equal((await ctx.server.waitTask(high)).state, "completed");
      const task = await ctx.server.waitTask(low);
      assert.equal(task.state, "completed", JSON.stringify(task));
      const crunched = stepNamed(task, "crunch");
      assert.deepEqual(crunched.result, { resumed: { row: 40 } });
      assert.equal(crunched.attempts, 1, "the preempted attempt was given back");
      const reason = `preempted by task ${high} step "alert" (priority 5)`;
      assert.deepEqual(seen, [
        ["start", 1, null],
        ["woke", true, reason],
        ["start", 1, { row: 40 }],
      ]);
      const audit = await ctx.auditOf(low, "crunch");
      assert.ok(audit.some((a) => a.from === "running" && a.to === "ready" && a.reason === reason), JSON.stringify(audit));
    }),
  );

  it(
    "leaves a worker with a free slot alone",
    env.run(async (ctx) => {
      await register(ctx, "nopre");
      const seen: unknown[] = [];
      let released = false;
      ctx.cleanup(() => (released = true));
      await ctx.startWorker("nopre", { "ts.crunch": crunch(seen, () => released), "ts.alert": alert }, { concurrency: 2 });
      const low = await ctx.server.submit("nopre/crunch");
      await waitFor(async () => stepNamed(await ctx.server.task(low), "crunch").checkpoint, 10_000, "crunch to save its checkpoint");
      const high = await ctx.server.submit("nopre/page");
      assert.equal((await ctx.server.waitTask(high)).state, "completed", "run on the free slot");
      released = true;
      const task = await ctx.server.waitTask(low);
      assert.deepEqual(stepNamed(task, "crunch").result, { released: true });
      assert.deepEqual(seen, [
        ["start", 1, null],
        ["woke", false, null],
      ]);
    }),
  );

  it(
    "completes a step whose handler returns a result anyway",
    env.run(async (ctx) => {
      await register(ctx, "prek");
      let aborted: unknown;
      await ctx.startWorker(
        "prek",
        {
          "ts.crunch": async (step) => {
            if (!(await step.wait(30_000))) throw new Error("never preempted");
            aborted = step.signal.reason;
            return { finished: "anyway" };
          },
          "ts.alert": alert,
        },
        { concurrency: 1 },
      );
      const low = await ctx.server.submit("prek/crunch");
      await waitFor(async () => stepNamed(await ctx.server.task(low), "crunch").state === "running", 10_000, "crunch to run");
      const high = await ctx.server.submit("prek/page");
      const task = await ctx.server.waitTask(low);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(stepNamed(task, "crunch").result, { finished: "anyway" });
      assert.ok(aborted instanceof Preempted, "the step's signal was aborted with Preempted");
      assert.equal((await ctx.server.waitTask(high)).state, "completed");
      const audit = await ctx.auditOf(low, "crunch");
      assert.ok(!audit.some((a) => a.from === "running" && a.to === "ready"), JSON.stringify(audit));
    }),
  );
});
