// The worker and the event stream when the server goes away (SIGKILL, then a
// restart on the same database and port), and the worker when the server
// refuses its credentials.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Client, Unauthorized, Worker, type Event } from "../src/index.js";
import { LogCapture, serverEnv, within } from "../testing/harness.js";
import { stepNamed, waitFor, workflow } from "../testing/weftserver.js";

const env = serverEnv();

describe("a server restart", () => {
  it(
    "lets an outcome retried meanwhile land",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(workflow("crash", "  - name: report\n    handler: ts.report\n"));
      let started = false;
      let release = () => {};
      const released = new Promise<void>((r) => (release = r));
      ctx.cleanup(release);
      const { worker } = await ctx.startWorker("crash", {
        "ts.report": async (step) => {
          started = true;
          await released;
          return { ok: true, attempt: step.attempt };
        },
      });
      const id = await ctx.server.submit("crash/wf");
      await waitFor(() => started, 10_000, "the handler to start");
      await ctx.server.kill();
      release(); // the handler returns while the server is down
      await waitFor(() => ctx.logs.find("complete of step", "retrying"), 10_000, "the complete to be retried");
      await ctx.server.restart(); // same database and port, well within the 30 s lease
      const task = await ctx.server.waitTask(id, 30_000);
      assert.equal(task.state, "completed", JSON.stringify(task));
      const step = stepNamed(task, "report");
      assert.deepEqual(step.result, { ok: true, attempt: 1 }, "the first attempt's outcome landed");
      assert.equal(step.attempts, 1);
      assert.equal(step.engine_id, worker.workerId);
      await waitFor(() => ctx.logs.find("complete recorded"), 5000, "the worker to log the recorded outcome");
    }),
  );

  it(
    "resumes the event stream after the last event, none missed, none twice",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(workflow("evr", "  - name: a\n    handler: nobody.evr\n"));
      const c = new Client(ctx.server.url, { token: ctx.server.adminToken, fetch: ctx.fetch });
      const first = await c.submit("evr/wf");
      const stop = new AbortController();
      ctx.cleanup(() => stop.abort());
      const seen: Event[] = [];
      const following = (async () => {
        for await (const e of c.events({ namespace: "evr", after: "start" }, { signal: stop.signal })) {
          seen.push(e);
          if (e.type === "task.cancelled" && e.task_id !== first.id) return;
        }
      })();
      await waitFor(() => seen.length >= 2, 10_000, "the first task's events");
      await ctx.server.kill();
      await ctx.server.restart();
      const second = await c.submit("evr/wf");
      await c.cancel(second.id);
      await within(following, 20_000, "the events after the restart");
      assert.deepEqual(
        seen.map((e) => [e.type, e.task_id]),
        [
          ["task.submitted", first.id],
          ["step.ready", first.id],
          ["task.submitted", second.id],
          ["step.ready", second.id],
          ["task.cancelled", second.id],
        ],
      );
      assert.equal(new Set(seen.map((e) => e.cursor)).size, seen.length);
    }),
  );
});

describe("refused credentials", () => {
  async function refused(url: string, token: string): Promise<Unauthorized> {
    const worker = new Worker(url, { token, name: "refused", namespaces: ["refused"], logger: new LogCapture() });
    worker.handle("ts.never", () => null);
    const t0 = performance.now();
    const err = await worker.run({ signals: false }).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(performance.now() - t0 < 5000, "refused credentials are not retried");
    assert.ok(err instanceof Unauthorized, String(err));
    return err;
  }

  it(
    "stop the worker at once when the token is wrong",
    env.run(async (ctx) => {
      const err = await refused(ctx.server.url, "weft_0123456789abcdef_not-a-real-secret");
      assert.deepEqual([err.status, err.code], [401, "unauthenticated"]);
      assert.match(err.message, /token/);
    }),
  );

  it(
    "stop the worker at once when the token lacks workers:connect",
    env.run(async (ctx) => {
      const err = await refused(ctx.server.url, await ctx.server.createKey("reader", "tasks:read"));
      assert.deepEqual([err.status, err.code], [403, "forbidden"]);
      assert.match(err.message, /workers:connect/);
    }),
  );

  it(
    "stop a running worker whose key is revoked",
    env.run(async (ctx) => {
      const token = await ctx.server.createKey("revoked", "workers:connect");
      const logs = new LogCapture();
      const worker = new Worker(ctx.server.url, { token, name: "revoked", heartbeatIntervalMs: 200, waitMs: 1000, logger: logs, fetch: ctx.fetch });
      worker.handle("ts.never", () => null);
      const done = worker.run({ signals: false }).then(
        () => undefined,
        (e: unknown) => e,
      );
      await waitFor(() => worker.workerId, 10_000, "the worker to register");
      const keys = await ctx.server.weft("keys", "list");
      const keyId = keys.split("\n").find((l) => l.includes("revoked"))?.trim().split(/\s+/)[0];
      assert.ok(keyId, keys);
      await ctx.server.weft("keys", "revoke", keyId);
      const err = await within(done, 10_000, "the worker to stop");
      assert.ok(err instanceof Unauthorized, String(err));
      assert.equal(err.status, 401);
      assert.match(err.message, /refused: the server did not accept the token/);
    }),
  );
});
