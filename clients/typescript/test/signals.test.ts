// run() and SIGINT/SIGTERM, in a worker process of its own: one signal
// drains the running handler and deregisters; a second stops without waiting.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { describe, it } from "node:test";
import { fileURLToPath } from "node:url";

import { serverEnv, within, type Ctx } from "../testing/harness.js";
import { stepNamed, waitFor, workflow } from "../testing/weftserver.js";

const env = serverEnv();
const script = join(dirname(fileURLToPath(import.meta.url)), "..", "testing", "signal-worker.js");

/** Start the worker process serving ns; resolves once its handler runs. */
async function startProcess(ctx: Ctx, ns: string, holdMs: number, stubborn: boolean) {
  await ctx.server.registerWorkflow(workflow(ns, "  - name: s\n    handler: ts.sig\n"));
  const proc = spawn(process.execPath, [script], {
    env: { ...process.env, WEFT_SERVER: ctx.server.url, WEFT_TOKEN: ctx.workerToken, WEFT_NS: ns, WEFT_HOLD_MS: String(holdMs), WEFT_STUBBORN: stubborn ? "1" : "" },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: string[] = [];
  createInterface({ input: proc.stdout }).on("line", (line) => {
    lines.push(line);
    ctx.logs.info(`worker process: ${line}`);
  });
  const exited = new Promise<number | null>((r) => proc.once("exit", (code) => r(code)));
  ctx.cleanup(async () => {
    proc.kill("SIGKILL");
    await exited;
  });
  const id = await ctx.server.submit(`${ns}/wf`);
  await waitFor(() => lines.includes("handler started"), 10_000, "the handler to start");
  return { proc, lines, exited, id };
}

describe("run() and signals", () => {
  it(
    "drains the running handler on SIGTERM, then deregisters and returns",
    env.run(async (ctx) => {
      const { proc, lines, exited, id } = await startProcess(ctx, "sigone", 1500, true);
      proc.kill("SIGTERM");
      assert.equal(await within(exited, 15_000, "the worker process to exit"), 0, lines.join("\n"));
      assert.ok(lines.includes("handler returns, aborted=false"), lines.join("\n"));
      assert.ok(lines.some((l) => l.includes("deregistered")), lines.join("\n"));
      assert.ok(lines.includes("run returned"), lines.join("\n"));
      const task = await ctx.server.task(id);
      assert.equal(task.state, "completed", JSON.stringify(task));
      assert.deepEqual(stepNamed(task, "s").result, { aborted: false });
    }),
  );

  it(
    "stops without waiting on a second SIGINT, aborting the handler",
    env.run(async (ctx) => {
      const { proc, lines, exited, id } = await startProcess(ctx, "sigtwo", 60_000, false);
      const t0 = performance.now();
      proc.kill("SIGINT");
      await waitFor(() => lines.some((l) => l.includes("SIGINT: stopping")), 5000, "the first signal to be heard");
      proc.kill("SIGINT");
      assert.equal(await within(exited, 10_000, "the worker process to exit"), 0, lines.join("\n"));
      assert.ok(performance.now() - t0 < 5000, "it did not wait for the handler");
      assert.ok(lines.some((l) => l.includes("SIGINT again: stopping without waiting")), lines.join("\n"));
      assert.ok(lines.includes("handler returns, aborted=true"), lines.join("\n"));
      // Deregistered: the step goes back to the queue at once, for another worker.
      const step = await waitFor(async () => {
        const s = stepNamed(await ctx.server.task(id), "s");
        return s.state !== "running" ? s : undefined;
      }, 5000, "the step to be released");
      assert.ok(["ready", "waiting"].includes(step.state), JSON.stringify(step));
    }),
  );
});
