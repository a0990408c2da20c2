// The server's side of the worker protocol that the worker relies on, spoken
// through the bare transport (no Worker): heartbeat release of unlisted
// steps, the progress endpoint, and the server's own enforcement of timeouts.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { APIError, StaleLease, type ClaimedStep, type ClaimReply, type HeartbeatReply, type WorkerRegistered } from "../src/index.js";
import { Transport } from "../src/transport.js";
import { serverEnv, type Ctx } from "../testing/harness.js";
import { waitFor, workflow } from "../testing/weftserver.js";

const env = serverEnv();

async function rawWorker(ctx: Ctx, ns: string, handler: string): Promise<[Transport, string, WorkerRegistered]> {
  const t = new Transport(ctx.server.url, { token: ctx.workerToken, timeoutMs: 10_000 });
  const reg = await t.request<WorkerRegistered>("POST", "/v1/workers", { name: ns, handlers: [handler], namespaces: [ns] });
  ctx.cleanup(() => t.request("DELETE", `/v1/workers/${reg.worker_id}`));
  return [t, reg.worker_id, reg];
}

async function claimOne(t: Transport, wid: string, ns: string, handler: string): Promise<ClaimedStep> {
  const body = { handlers: [handler], namespaces: [ns], max: 1, wait_ms: 5000 };
  const reply = await t.request<ClaimReply>("POST", `/v1/workers/${wid}/claim`, body, { timeoutMs: 15_000 });
  assert.equal(reply.steps?.length, 1, JSON.stringify(reply));
  return reply.steps?.[0] as ClaimedStep;
}

describe("worker protocol", () => {
  it(
    "releases a held step that a heartbeat leaves out",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(workflow("rel", "  - name: a\n    handler: raw.rel\n"));
      const [t, wid, reg] = await rawWorker(ctx, "rel", "raw.rel");
      await ctx.server.submit("rel/wf");
      const step = await claimOne(t, wid, "rel", "raw.rel");
      const beat = await t.request<HeartbeatReply>("POST", `/v1/workers/${wid}/heartbeat`, { steps: [step.fence] });
      assert.deepEqual(beat.lost, []);
      // Only steps claimed more than two heartbeat intervals ago are released: let that time pass.
      await new Promise((r) => setTimeout(r, 2 * reg.heartbeat_interval_ms + 500));
      await t.request("POST", `/v1/workers/${wid}/heartbeat`, { steps: [] });
      await waitFor(
        async () => (await ctx.server.api<{ state: string }>("GET", `/v1/steps/${step.step_id}`)).state !== "running",
        3000,
        "the server to release the step the heartbeat did not list",
      );
      await assert.rejects(t.request("POST", `/v1/workers/${wid}/complete`, { fence: step.fence, result: 1 }), StaleLease);
    }),
  );

  it(
    "records progress, refuses a fraction out of range and a stale fence",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(workflow("progp", "  - name: a\n    handler: raw.prog\n"));
      const [t, wid] = await rawWorker(ctx, "progp", "raw.prog");
      const id = await ctx.server.submit("progp/wf");
      const step = await claimOne(t, wid, "progp", "raw.prog");
      const path = `/v1/workers/${wid}/progress`;
      assert.equal(await t.request("POST", path, { fence: step.fence, fraction: 0.25, message: "a quarter" }), undefined);
      const got = (await ctx.server.task(id)).steps?.find((s) => s.id === step.step_id);
      assert.deepEqual([got?.progress, got?.progress_message], [0.25, "a quarter"]);
      await assert.rejects(t.request("POST", path, { fence: step.fence, fraction: 1.5 }), (e: unknown) => e instanceof APIError && e.status === 400);
      const stale = { ...step.fence, attempt: step.fence.attempt + 1 };
      await assert.rejects(t.request("POST", path, { fence: stale, fraction: 0.5 }), StaleLease);
    }),
  );

  it(
    "fails a step whose timeout passed though its worker keeps listing it",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(workflow("stmo", "  - name: a\n    handler: raw.tmo\n    timeout: 1s\n    retry: {max_attempts: 1}\n"));
      const [t, wid] = await rawWorker(ctx, "stmo", "raw.tmo");
      const id = await ctx.server.submit("stmo/wf");
      const step = await claimOne(t, wid, "stmo", "raw.tmo");
      assert.equal(step.timeout_ms, 1000);
      await waitFor(
        async () => {
          await t.request("POST", `/v1/workers/${wid}/heartbeat`, { steps: [step.fence] });
          return ["failed", "completed"].includes((await ctx.server.task(id)).state);
        },
        12_000,
        "the server to fail the step after its 1s timeout",
        500,
      );
      assert.equal((await ctx.server.task(id)).state, "failed");
    }),
  );
});
