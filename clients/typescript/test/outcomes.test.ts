// Outcomes a store cannot keep as they are: whatever a handler returns or
// throws, its step ends (failed for good, or retried by its policy with its
// error text sanitized) after one run per attempt, never reclaimed and run
// again behind its attempts' back.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import type { Handler, Task } from "../src/index.js";
import { serverEnv, type Ctx } from "../testing/harness.js";
import { stepNamed, workflow } from "../testing/weftserver.js";

const env = serverEnv();

/** Run fn as the handler of a one-step task; return the task and the attempts fn ran. */
async function runCase(ctx: Ctx, ns: string, fn: Handler): Promise<[Task, number[]]> {
  await ctx.server.registerWorkflow(workflow(ns, `  - name: s\n    handler: ts.${ns}\n    retry: {max_attempts: 2, backoff: fixed, initial: 50ms}\n`));
  const runs: number[] = [];
  await ctx.startWorker(ns, {
    [`ts.${ns}`]: (step) => {
      runs.push(step.attempt);
      return fn(step);
    },
  });
  return [await ctx.server.waitTask(await ctx.server.submit(`${ns}/wf`)), runs];
}

async function assertEnds(ctx: Ctx, [task, runs]: [Task, number[]], state: string, attempts: number, error: string): Promise<void> {
  const step = stepNamed(task, "s");
  assert.equal(task.state, state === "failed" ? "failed" : "completed", JSON.stringify(task));
  assert.deepEqual([step.state, step.attempts], [state, attempts], JSON.stringify(step));
  assert.deepEqual(runs, Array.from({ length: attempts }, (_, i) => i + 1), "one run per attempt, none behind their count");
  assert.ok(step.error?.includes(error), `${JSON.stringify(step.error)} holds ${JSON.stringify(error)}`);
  assert.ok(!step.error?.includes("\0"));
  for (const a of await ctx.auditOf(task.id, "s")) assert.ok(!a.reason?.includes("lease lapsed"), JSON.stringify(a));
}

describe("outcomes the store cannot keep", () => {
  it(
    "fails a result with a NUL for good",
    env.run(async (ctx) => {
      await assertEnds(ctx, await runCase(ctx, "nulresult", () => ({ v: "a\0b" })), "failed", 1, "result cannot be stored: result.v contains a NUL character");
    }),
  );

  it(
    "fails a result with a lone surrogate for good",
    env.run(async (ctx) => {
      const expected = "result cannot be stored: result.v contains a \\u escape of a lone UTF-16 surrogate";
      await assertEnds(ctx, await runCase(ctx, "badutf8", () => ({ v: "a\udcffb" })), "failed", 1, expected);
    }),
  );

  it(
    "sanitizes a NUL in an error and retries",
    env.run(async (ctx) => {
      const fail = () => {
        throw new TypeError("bad \0 error \udcff");
      };
      await assertEnds(ctx, await runCase(ctx, "nulerror", fail), "failed", 2, "TypeError: bad \ufffd error \ufffd");
    }),
  );

  it(
    "fails a result larger than the server takes for good",
    env.run(async (ctx) => {
      // Larger than the server's --max-body (1 MiB): refused with 413, reported as a permanent failure instead.
      const result = await runCase(ctx, "toolarge", () => ({ v: "x".repeat(2 << 20) }));
      await assertEnds(ctx, result, "failed", 1, "the server refused the result: 413 body_too_large");
      assert.ok(ctx.logs.find("complete of step", "refused", "reporting the attempt failed instead"), ctx.logs.lines.join("\n"));
    }),
  );

  it(
    "fails an attempt whose result is not JSON",
    env.run(async (ctx) => {
      await assertEnds(ctx, await runCase(ctx, "notjson", () => ({ n: 1n })), "failed", 2, "TypeError: Do not know how to serialize a BigInt");
    }),
  );
});
