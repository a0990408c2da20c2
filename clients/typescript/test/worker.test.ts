// The worker against a real `weft serve`: results, failures, retries,
// snoozes, checkpoints, progress, timeouts, lost steps, heartbeats, re-registration,
// stop and tracing.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Permanent, RetryAfter, Snooze, StaleLease, type Step } from "../src/index.js";
import { serverEnv, within } from "../testing/harness.js";
import { HTTPError, stepNamed, waitFor, workflow } from "../testing/weftserver.js";

const env = serverEnv();
const FAST_RETRY = "retry: {max_attempts: 3, backoff: fixed, initial: 100ms}";
const one = (ns: string, handler: string, extra = "") => workflow(ns, `  - name: s\n    handler: ${handler}\n${extra}`);

/** A promise and its resolve, to release a waiting handler. */
function gate(): { opened: Promise<void>; open: () => void } {
  let open = () => {};
  const opened = new Promise<void>((r) => (open = r));
  return { opened, open };
}

describe("Worker", () => {
  it(
    "passes results to dependent steps",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(
        workflow(
          "flow",
          `  - name: double
    handler: ts.double
  - name: add
    handler: ts.add
    depends_on: [double]
    config: {plus: 1}
  - name: echo
    handler: exec
    depends_on: [add]
    config: {command: ["cat"]}
`,
        ),
      );
      const { worker } = await ctx.startWorker("flow", {
        "ts.double": async (step: Step<{ n: number }>) => ({ n: step.input.n * 2 }),
        "ts.add": (step) => ({ n: (step.deps["double"] as { n: number }).n + (step.config as { plus: number }).plus, attempt: step.attempt }),
      });
      const task = await ctx.server.waitTask(await ctx.server.submit("flow/wf", { n: 3 }));
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(stepNamed(task, "double").result, { n: 6 });
      const add = stepNamed(task, "add");
      assert.deepEqual(add.result, { n: 7, attempt: 1 });
      assert.equal(add.engine_id, worker.workerId, "run by the TypeScript worker");
      // The built-in exec step (run by the server's engine) got the worker's result.
      assert.deepEqual((stepNamed(task, "echo").result as { deps: Record<string, unknown> }).deps["add"], { n: 7, attempt: 1 });
      const listed = await ctx.server.api<{ workers: { id: string; kind: string; handlers: string[] }[] }>("GET", "/v1/workers");
      const mine = listed.workers.filter((w) => w.id === worker.workerId);
      assert.deepEqual(
        mine.map((w) => [w.kind, w.handlers]),
        [["remote", ["ts.add", "ts.double"]]],
      );
    }),
  );

  it(
    "retries a failed attempt, then completes",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("retry", "ts.flaky", `    ${FAST_RETRY}\n`));
      await ctx.startWorker("retry", {
        "ts.flaky": (step) => {
          if (step.attempt === 1) throw new Error("flaky backend");
          return { attempt: step.attempt };
        },
      });
      const id = await ctx.server.submit("retry/wf");
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual([stepNamed(task, "s").result, stepNamed(task, "s").attempts], [{ attempt: 2 }, 2]);
      const reasons = await ctx.auditOf(id, "s");
      assert.ok(reasons.some((r) => r.reason?.includes("Error: flaky backend")), JSON.stringify(reasons));
    }),
  );

  it(
    "fails at once on Permanent",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("perm", "ts.strict", `    ${FAST_RETRY}\n`));
      await ctx.startWorker("perm", {
        "ts.strict": () => {
          throw new Permanent("input is not valid");
        },
      });
      const task = await ctx.server.waitTask(await ctx.server.submit("perm/wf"));
      const step = stepNamed(task, "s");
      assert.deepEqual([task.state, step.state, step.attempts], ["failed", "failed", 1]);
      assert.match(step.error ?? "", /input is not valid/);
    }),
  );

  it(
    "waits as RetryAfter says instead of the policy's backoff",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("later", "ts.later", `    ${FAST_RETRY}\n`));
      await ctx.startWorker("later", {
        "ts.later": (step) => {
          if (step.attempt === 1) throw new RetryAfter(1500, "rate limited");
          return { attempt: step.attempt };
        },
      });
      const id = await ctx.server.submit("later/wf");
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      const audit = (await ctx.server.audit(id)).filter((e) => e.step === "s");
      const failed = audit.find((e) => e.from === "running" && e.reason?.includes("rate limited"));
      const second = audit.find((e) => e.to === "running" && e.attempt === 2);
      assert.ok(failed && second, JSON.stringify(audit));
      assert.ok(Date.parse(second.at) - Date.parse(failed.at) >= 1400, JSON.stringify([failed, second]));
    }),
  );

  it(
    "runs a snoozed step again with the same attempt, which then completes",
    env.run(async (ctx) => {
      // One attempt only: a snooze that used it would fail the step.
      await ctx.server.registerWorkflow(one("snooze", "ts.notyet", "    retry: {max_attempts: 1}\n"));
      const attempts: number[] = [];
      await ctx.startWorker("snooze", {
        "ts.notyet": (step) => {
          attempts.push(step.attempt);
          if (attempts.length === 1) throw new Snooze(300, "the export is not ready yet");
          return { runs: attempts.length, attempt: step.attempt };
        },
      });
      const id = await ctx.server.submit("snooze/wf");
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      const step = stepNamed(task, "s");
      assert.deepEqual([step.result, step.attempts], [{ runs: 2, attempt: 1 }, 1]);
      assert.deepEqual(attempts, [1, 1], "run again with the same attempt number");
      const audit = (await ctx.server.audit(id)).filter((e) => e.step === "s");
      const snoozed = audit.find((e) => e.from === "running" && e.reason?.includes("the export is not ready yet"));
      const again = audit.filter((e) => e.to === "running").at(-1);
      assert.ok(snoozed && again && snoozed.to !== "failed", JSON.stringify(audit));
      assert.equal(again.attempt, 1, JSON.stringify(audit));
      assert.ok(Date.parse(again.at) - Date.parse(snoozed.at) >= 250, JSON.stringify([snoozed, again]));
      assert.ok(ctx.logs.find("snoozed for 300ms", "the export is not ready yet"), ctx.logs.lines.join("\n"));
    }),
  );

  it(
    "gives attempt two the checkpoint of attempt one",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("ckpt", "ts.resumable", `    ${FAST_RETRY}\n`));
      const seen: [number, unknown][] = [];
      await ctx.startWorker("ckpt", {
        "ts.resumable": async (step) => {
          seen.push([step.attempt, step.claimedCheckpoint]);
          if (step.attempt === 1) {
            await step.checkpoint({ rows_done: 500 });
            assert.deepEqual(step.savedCheckpoint, { rows_done: 500 });
            throw new Error("crashed after the checkpoint");
          }
          return { resumed_from: step.claimedCheckpoint };
        },
      });
      const task = await ctx.server.waitTask(await ctx.server.submit("ckpt/wf"));
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(seen, [
        [1, null],
        [2, { rows_done: 500 }],
      ]);
      assert.deepEqual(stepNamed(task, "s").result, { resumed_from: { rows_done: 500 } });
    }),
  );

  it(
    "shows progress on the running step",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("prog", "ts.long"));
      const release = gate();
      ctx.cleanup(release.open);
      const recorded: boolean[] = [];
      await ctx.startWorker("prog", {
        "ts.long": async (step) => {
          recorded.push(await step.progress(0.5, "half way"));
          await release.opened;
          recorded.push(await step.progress(1, "done"));
          return { ok: true };
        },
      });
      const id = await ctx.server.submit("prog/wf");
      const running = await waitFor(async () => {
        const s = stepNamed(await ctx.server.task(id), "s");
        return s.progress === 0.5 ? s : undefined;
      }, 5000, "progress 0.5 on the running step");
      assert.equal(running.progress_message, "half way");
      release.open();
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(recorded, [true, true]);
      const s = stepNamed(task, "s");
      assert.deepEqual([s.progress, s.progress_message], [1, "done"]);
    }),
  );

  it(
    "reports a timeout, retries, and ignores the late return",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("tmo", "ts.slow", `    timeout: 1s\n    ${FAST_RETRY}\n`));
      const late: [boolean, unknown][] = [];
      const { worker } = await ctx.startWorker("tmo", {
        "ts.slow": async (step) => {
          if (step.attempt > 1) return { attempt: step.attempt };
          assert.equal(step.timeoutMs, 1000);
          assert.ok((step.timeLeft() ?? 0) > 500);
          await new Promise((r) => setTimeout(r, 3000)); // ignores its signal, as a stuck handler would
          late.push([step.cancelled, step.signal.reason]);
          return { late: true };
        },
      });
      const id = await ctx.server.submit("tmo/wf");
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(late, [], "attempt 2 ran without waiting for attempt 1's handler");
      const reasons = await ctx.auditOf(id, "s");
      assert.ok(reasons.some((r) => r.reason?.includes("step timed out after 1s") && r.engine_id === worker.workerId), JSON.stringify(reasons));
      await waitFor(() => late.length > 0, 5000, "attempt 1's handler to return");
      assert.equal(late[0]?.[0], true, "it knows it was cancelled");
      const reason: unknown = late[0]?.[1];
      assert.ok(reason instanceof StaleLease, "its signal was aborted");
      await waitFor(() => ctx.logs.find("returned after the step was timed out"), 2000, "the late return to be logged");
      const s = stepNamed(await ctx.server.task(id), "s");
      assert.deepEqual([s.result, s.attempts], [{ attempt: 2 }, 2]);
    }),
  );

  it(
    "drops a step whose task was cancelled, aborting its handler",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("lost", "ts.waiting"));
      const started = gate();
      const outcome: [boolean, boolean, boolean][] = [];
      const { worker } = await ctx.startWorker("lost", {
        "ts.waiting": async (step) => {
          started.open();
          const woke = await step.wait(15_000);
          outcome.push([woke, step.lost, step.signal.aborted]);
          return { finished: true };
        },
      });
      const id = await ctx.server.submit("lost/wf");
      await within(started.opened, 10_000, "the handler to start");
      await ctx.server.api("POST", `/v1/tasks/${id}/cancel`, {});
      await waitFor(() => outcome.length > 0, 5000, "the handler to see its step lost");
      assert.deepEqual(outcome, [[true, true, true]]);
      await waitFor(() => worker.held().length === 0, 5000, "the worker to stop listing the step");
      const task = await ctx.server.task(id);
      assert.deepEqual([task.state, stepNamed(task, "s").state], ["cancelled", "cancelled"]);
      assert.equal(ctx.logs.find("complete recorded"), undefined);
    }),
  );

  it(
    "lists a step in heartbeats while its outcome is retried",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("hb", "ts.held"));
      const release = gate();
      ctx.cleanup(release.open);
      const beats: number[][] = [];
      const refused: string[] = [];
      let refusing = true;
      const spy: typeof fetch = async (input, init) => {
        const url = String(input);
        if (url.endsWith("/heartbeat")) beats.push((JSON.parse(String(init?.body)) as { steps: { step_id: number }[] }).steps.map((f) => f.step_id));
        if (url.endsWith("/complete") && refusing) {
          refused.push(url);
          throw new TypeError("fetch failed", { cause: new Error("test: the server is away") });
        }
        return ctx.fetch(input, init);
      };
      const { worker } = await ctx.startWorker("hb", { "ts.held": async () => (await release.opened, { ok: true }) }, { fetch: spy });
      const id = await ctx.server.submit("hb/wf");
      const sid = await waitFor(async () => (await ctx.server.task(id)).steps?.find((s) => s.state === "running")?.id, 10_000, "the step to run");
      await waitFor(() => beats.some((b) => b.includes(sid)), 5000, "a heartbeat listing the running step");
      release.open();
      await waitFor(() => refused.length > 0, 5000, "the complete to be refused");
      const n = beats.length;
      await waitFor(() => beats.length > n, 5000, "a heartbeat while the report is retried");
      assert.ok(beats[n]?.includes(sid), "the step is listed while its outcome is being retried");
      refusing = false;
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      await waitFor(() => worker.held().length === 0, 5000, "the settled step to leave the listing");
    }),
  );

  it(
    "registers again when the server declared it dead",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("rejoin", "ts.work"));
      const { worker, errors } = await ctx.startWorker("rejoin", { "ts.work": (step) => ({ by: step.workerId }) });
      const old = worker.workerId as string;
      // As if the reaper had declared it dead. Only the credential that registered a worker may remove it.
      await ctx.server.api("DELETE", `/v1/workers/${old}`, undefined, { token: ctx.workerToken });
      await waitFor(() => worker.workerId !== old, 10_000, "the worker to register again");
      assert.ok(ctx.logs.find("unknown to the server", "registering again"));
      const task = await ctx.server.waitTask(await ctx.server.submit("rejoin/wf"));
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.equal(stepNamed(task, "s").engine_id, worker.workerId);
      assert.deepEqual(errors, []);
    }),
  );

  it(
    "drains running handlers on stop, then deregisters",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("drain", "ts.busy"));
      const started = gate();
      const { worker, errors, done } = await ctx.startWorker("drain", {
        "ts.busy": async (step) => {
          started.open();
          await new Promise((r) => setTimeout(r, 1000));
          return { aborted: step.signal.aborted };
        },
      });
      const id = await ctx.server.submit("drain/wf");
      await within(started.opened, 10_000, "the handler to start");
      worker.stop();
      await within(done, 10_000, "run() to return after draining");
      assert.deepEqual(errors, []);
      const task = await ctx.server.task(id);
      assert.equal(task.state, "completed", "the running step finished and was reported before the worker left");
      assert.deepEqual(stepNamed(task, "s").result, { aborted: false });
      // Deregistered: its credential hears that the worker is lost, another one does not learn it exists.
      const beat = (token?: string) =>
        ctx.server.api("POST", `/v1/workers/${worker.workerId}/heartbeat`, { steps: [] }, token ? { token } : {}).then(
          () => "",
          (e: unknown) => (e instanceof HTTPError ? e.body : String(e)),
        );
      assert.match(await beat(ctx.workerToken), /worker_lost/);
      assert.match(await beat(), /not_found/);
    }),
  );

  it(
    "stops promptly while a claim waits",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("idle", "ts.never"));
      let claiming = 0;
      const spy: typeof fetch = async (input, init) => {
        const claim = String(input).endsWith("/claim");
        if (claim) claiming++;
        try {
          return await ctx.fetch(input, init);
        } finally {
          if (claim) claiming--;
        }
      };
      const { worker, done } = await ctx.startWorker("idle", { "ts.never": () => null }, { waitMs: 20_000, fetch: spy });
      await waitFor(() => claiming > 0, 5000, "the claim's long poll to start");
      const t0 = performance.now();
      worker.stop();
      await within(done, 10_000, "run() to return");
      assert.ok(performance.now() - t0 < 3000, "stop() did not wait for the long poll");
    }),
  );

  it(
    "refuses a checkpoint after the timeout without sending it",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("late", "ts.late", "    timeout: 300ms\n    retry: {max_attempts: 1}\n"));
      const raised: unknown[] = [];
      await ctx.startWorker("late", {
        "ts.late": async (step) => {
          await step.wait(5000);
          await step.checkpoint({ too: "late" }).catch((e: unknown) => raised.push(e));
          return null;
        },
      });
      const id = await ctx.server.submit("late/wf");
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "failed", JSON.stringify(task));
      assert.match(stepNamed(task, "s").error ?? "", /step timed out after 300ms/);
      await waitFor(() => raised.length > 0, 5000, "the late checkpoint to be refused");
      assert.ok(raised[0] instanceof StaleLease);
      assert.equal(stepNamed(await ctx.server.task(id), "s").checkpoint, undefined);
    }),
  );

  it(
    "gives the step the submitter's traceparent, or the task's own",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(one("traced", "ts.show"));
      await ctx.startWorker("traced", { "ts.show": (step) => ({ traceparent: step.traceparent }) });
      const caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
      const traced = await ctx.server.submit("traced/wf", {}, { traceparent: caller });
      const plain = await ctx.server.submit("traced/wf", {});
      assert.deepEqual(stepNamed(await ctx.server.waitTask(traced), "s").result, { traceparent: caller });
      const own = (stepNamed(await ctx.server.waitTask(plain), "s").result as { traceparent: string }).traceparent;
      assert.match(own, /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/);
      assert.ok(!own.includes("4bf92f3577b34da6a3ce929d0e0e4736"));
    }),
  );
});
