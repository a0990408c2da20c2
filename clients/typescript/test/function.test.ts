// Durable functions in TypeScript against a real `weft serve`: the server
// records the calls, the worker replays the function over them.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { CallError, type FunctionContext } from "../src/index.js";
import { serverEnv } from "../testing/harness.js";
import { stepNamed } from "../testing/weftserver.js";

const env = serverEnv();

function functionWorkflow(ns: string, handler: string, name = "fn"): string {
  return `namespace: ${ns}\nname: ${name}\nversion: "1"\nsteps:\n  - name: function\n    type: function\n    handler: ${handler}\n`;
}

describe("durable functions", () => {
  it(
    "runs each call once and resumes the function over the recorded results",
    env.run(async (ctx) => {
      const ns = "tsfn";
      await ctx.server.registerWorkflow(functionWorkflow(ns, "tsfn.checkout"));
      await ctx.server.registerWorkflow(`namespace: ${ns}\nname: label\nversion: "1"\nsteps:\n  - name: print\n    handler: exec\n    config: {command: ["cat"]}\n`);
      const ran: Record<string, number> = {};
      const count = <T>(name: string, value: T): T => {
        ran[name] = (ran[name] ?? 0) + 1;
        return value;
      };
      const checkout = async (fn: FunctionContext, order: { id: string; amount: number }) => {
        const charge = await fn.step("charge", () => count("charge", `ch_${order.id}`), { maxAttempts: 2 });
        const tax = fn.go("tax", async () => count("tax", order.amount / 10));
        const fee = fn.go("fee", () => count("fee", 1));
        const [t, f] = await Promise.all([tax.get(), fee.get()]);
        await fn.sleep(50);
        const approval = (await fn.waitSignal("approval", { timeoutMs: 60_000 })) as { by: string };
        const label = (await fn.child(`${ns}/label`, { order: order.id })) as { print: { input: { order: string } } };
        return { charge, total: order.amount + t + f, by: approval.by, label: label.print.input.order };
      };
      await ctx.startWorker(ns, {}, {}, { "tsfn.checkout": checkout as never });
      const id = await ctx.server.submit(`${ns}/fn`, { id: "A1", amount: 100 });
      await ctx.server.api("POST", `/v1/tasks/${id}/signals/approval`, { payload: { by: "ada" } });
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(stepNamed(task, "function").result, { charge: "ch_A1", total: 111, by: "ada", label: "A1" });
      assert.deepEqual(
        task.steps?.map((s) => s.name),
        ["function", "charge", "tax", "fee", "sleep", "approval", "label"],
      );
      assert.deepEqual(ran, { charge: 1, tax: 1, fee: 1 });
    }),
  );

  it(
    "snoozes, without using an attempt, while a call an operator retried has not ended",
    env.run(async (ctx) => {
      const ns = "tsfnsnooze";
      // One attempt for the function step: a wait that used it would fail the task.
      await ctx.server.registerWorkflow(
        `namespace: ${ns}\nname: fn\nversion: "1"\nsteps:\n  - name: function\n    type: function\n    handler: ${ns}.flaky\n    retry: {max_attempts: 1}\n`,
      );
      let tries = 0;
      const flaky = async (fn: FunctionContext) => {
        const v = await fn.step(
          "flaky",
          async () => {
            if (++tries === 1) throw new Error("down");
            await new Promise((r) => setTimeout(r, 1500));
            return "up";
          },
          { maxAttempts: 1 },
        );
        return `after ${v as string}`;
      };
      await ctx.startWorker(ns, {}, {}, { [`${ns}.flaky`]: flaky as never });
      const id = await ctx.server.submit(`${ns}/fn`);
      const failed = await ctx.server.waitTask(id);
      assert.equal(failed.state, "failed", JSON.stringify(failed));
      await ctx.server.api("POST", `/v1/tasks/${id}/retry`);
      const task = await ctx.server.waitTask(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.equal(stepNamed(task, "function").result, "after up");
      const audit = await ctx.auditOf(id, "function");
      const retried = audit.findIndex((a) => a.reason === "task retried");
      const snoozed = audit.slice(retried).filter((a) => a.to === "waiting" && a.reason?.includes("the function waits for a call that has not ended"));
      assert.ok(retried >= 0 && snoozed.length > 0, JSON.stringify(audit));
      assert.deepEqual([...new Set(audit.filter((a) => a.attempt !== undefined).map((a) => a.attempt))], [1], JSON.stringify(audit));
      assert.equal(stepNamed(task, "function").attempts, 1);
    }),
  );

  it(
    "fails on a failed call it passes on, and on non-determinism",
    env.run(async (ctx) => {
      const ns = "tsfnfail";
      await ctx.server.registerWorkflow(functionWorkflow(ns, "tsfnfail.pay", "pay"));
      await ctx.server.registerWorkflow(functionWorkflow(ns, "tsfnfail.drift", "drift"));
      let runs = 0;
      const pay = async (fn: FunctionContext, input: { handle?: boolean }) => {
        try {
          await fn.step("charge", () => {
            throw new Error("card declined");
          }, { maxAttempts: 1 });
        } catch (err) {
          if (input.handle && err instanceof CallError) return fn.step("notify", () => `told: ${err.reason}`);
          throw err;
        }
        return "paid";
      };
      const drift = async (fn: FunctionContext) => fn.step(++runs === 1 ? "first" : "second", () => 1);
      await ctx.startWorker(ns, {}, {}, { "tsfnfail.pay": pay as never, "tsfnfail.drift": drift as never });
      const handled = await ctx.server.waitTask(await ctx.server.submit(`${ns}/pay`, { handle: true }));
      assert.equal(stepNamed(handled, "function").result, "told: Error: card declined (attempt 1 of 1)");
      const passed = await ctx.server.waitTask(await ctx.server.submit(`${ns}/pay`, { handle: false }));
      assert.equal(passed.state, "failed");
      assert.match(stepNamed(passed, "function").error ?? "", /call "charge" failed: Error: card declined/);
      const drifted = await ctx.server.waitTask(await ctx.server.submit(`${ns}/drift`));
      assert.equal(drifted.state, "failed");
      assert.match(stepNamed(drifted, "function").error ?? "", /non-determinism: call 1 is step "second", but the task recorded step "first" there/);
    }),
  );
});
