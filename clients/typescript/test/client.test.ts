// Client against a real `weft serve`: submit, read, list, signal, cancel,
// retry, the bulk actions and the event stream.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { APIError, Client, Unauthorized, type Event } from "../src/index.js";
import { serverEnv, type Ctx } from "../testing/harness.js";
import { checkSchema } from "../testing/schema.js";
import { stepNamed, workflow } from "../testing/weftserver.js";

const env = serverEnv();

const GATE = 'namespace: tssig\nname: gate\nversion: "1"\nsteps:\n  - name: approval\n    type: signal\n    signal: {name: go_live}\n';
// A step nobody serves: its task stays unfinished until cancelled.
const idle = (ns: string) => workflow(ns, "  - name: a\n    handler: nobody.idle\n");
// A step that fails for good: `false` exits 1, run by the server's own engine.
const failing = (ns: string) => workflow(ns, '  - name: a\n    handler: exec\n    config: {command: ["false"]}\n    retry: {max_attempts: 1}\n');

async function client(ctx: Ctx, permissions = "tasks:*"): Promise<Client> {
  return new Client(ctx.server.url, { token: await ctx.server.createKey("ts-client", permissions), fetch: ctx.fetch });
}

async function rejection(promise: Promise<unknown>): Promise<APIError> {
  const err = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  assert.ok(err instanceof APIError, `want an APIError, got ${String(err)}`);
  return err;
}

describe("Client", () => {
  it(
    "signals the waiting step, and refuses a signal once the task ended",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(GATE);
      const c = await client(ctx, "tasks:create,tasks:read,tasks:signal");
      const task = await c.submit("tssig/gate", { service: "api" }, { key: "release-1" });
      assert.equal((await c.submit("tssig/gate", undefined, { key: "release-1" })).id, task.id, "the key finds the task");
      assert.equal(await c.signal(task.id, "go_live", { approved_by: "ops" }), true);
      const done = await ctx.server.waitTask(task.id);
      assert.equal(done.state, "completed");
      assert.deepEqual(stepNamed(done, "approval").result, { signal: "go_live", payload: { approved_by: "ops" } });
      assert.equal((await c.task(task.id)).state, "completed");
      const err = await rejection(c.signal(task.id, "go_live"));
      assert.deepEqual([err.status, err.code], [409, "conflict"]);
    }),
  );

  it(
    "answers bad signals with their status and checks ids before sending",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(GATE);
      const c = await client(ctx, "tasks:create,tasks:read,tasks:signal");
      assert.deepEqual((({ status, code }) => [status, code])(await rejection(c.signal(999999, "go_live"))), [404, "not_found"]);
      const task = await c.submit("tssig/gate");
      const bad = await rejection(c.signal(task.id, "no spaces"));
      assert.equal(bad.status, 400);
      for (const id of [0, -1, 1.5, "7", true]) {
        await assert.rejects(c.signal(id as number, "go_live"), TypeError, String(id));
      }
      await assert.rejects(c.signal(task.id, ""), TypeError);
    }),
  );

  it(
    "refuses a credential without the permission",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(GATE);
      const c = await client(ctx);
      const reader = await client(ctx, "tasks:read");
      const task = await c.submit("tssig/gate");
      const err = await rejection(reader.signal(task.id, "go_live"));
      assert.ok(err instanceof Unauthorized);
      assert.deepEqual([err.status, err.code], [403, "forbidden"]);
      const nobody = new Client(ctx.server.url, { token: "weft_0123456789abcdef_not-a-real-secret", fetch: ctx.fetch });
      assert.deepEqual((({ status, code }) => [status, code])(await rejection(nobody.task(task.id))), [401, "unauthenticated"]);
    }),
  );

  it(
    "submits with tags, priority, times and supersede, and lists by tag and page",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(idle("tssub"));
      const c = await client(ctx);
      const runAt = new Date(Date.now() + 3_600_000);
      const task = await c.submit("tssub/wf", { n: 1 }, { tags: { env: "staging", team: "ts" }, key: "k1", priority: 7, runAt });
      assert.deepEqual(task.tags, { env: "staging", team: "ts" });
      assert.equal(task.priority, 7);
      assert.equal(Date.parse(task.run_at), runAt.getTime());
      assert.equal((await c.submit("tssub/wf", { n: 1 }, { key: "k1" })).id, task.id);
      const listed = await c.tasks({ tag: ["env=staging", "team=ts"] });
      assert.deepEqual(
        listed.tasks.map((t) => t.id),
        [task.id],
      );
      const bad = await rejection(c.submit("tssub/wf", undefined, { tags: { "bad key": "x" } }));
      assert.deepEqual([bad.status, bad.field], [400, "tags"]);
      await assert.rejects(c.submit("tssub/wf", undefined, { tags: { n: 1 } as unknown as Record<string, string> }), TypeError);

      const taker = await c.submit("tssub/wf", { n: 2 }, { key: "k1", onConflict: "supersede", goodUntil: new Date(Date.now() + 7_200_000) });
      assert.notEqual(taker.id, task.id);
      assert.equal(taker.superseded, task.id);
      assert.equal((await c.task(task.id)).state, "cancelled");

      const ids = [task.id, taker.id, (await c.submit("tssub/wf")).id].sort((a, b) => b - a);
      const first = await c.tasks({ namespace: "tssub", limit: 2 });
      assert.deepEqual(
        first.tasks.map((t) => t.id),
        ids.slice(0, 2),
      );
      assert.ok(first.next_cursor, "a cursor to the next page");
      const second = await c.tasks({ namespace: "tssub", limit: 2, cursor: first.next_cursor });
      assert.deepEqual(
        second.tasks.map((t) => t.id),
        ids.slice(2),
      );
      const all = [];
      for await (const t of c.allTasks({ namespace: "tssub", limit: 1 })) all.push(t.id);
      assert.deepEqual(all, ids);
    }),
  );

  it(
    "submits many tasks in one transaction, all of them or none",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(idle("tsmany"));
      const c = await client(ctx);
      const first = await c.submit("tsmany/wf", undefined, { key: "m0" });
      const tasks = await c.submitMany([
        { workflow: "tsmany/wf", input: { n: 1 } },
        { workflow: "tsmany/wf", key: "m0" },
        { workflow: "tsmany/wf", priority: 3, tags: { env: "test" } },
      ]);
      assert.equal(tasks.length, 3);
      assert.equal(tasks[0]?.duplicate, undefined);
      assert.equal(tasks[1]?.duplicate, true);
      assert.equal(tasks[1]?.id, first.id);
      assert.equal(tasks[2]?.priority, 3);
      const before = (await c.tasks({ namespace: "tsmany" })).tasks.length;
      // Supersede needs a key: a check of the engine's, named by index.
      const bad = await rejection(c.submitMany([{ workflow: "tsmany/wf" }, { workflow: "tsmany/wf", onConflict: "supersede" }]));
      assert.deepEqual([bad.status, bad.field], [400, "tasks[1].on_conflict"]);
      assert.equal((await c.tasks({ namespace: "tsmany" })).tasks.length, before, "a refused batch creates none of its tasks");
      await assert.rejects(c.submitMany([]), RangeError);
    }),
  );

  it(
    "cancels and retries a task with a reason in its audit trail",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(idle("tscancel"));
      await ctx.server.registerWorkflow(failing("tsretry"));
      const c = await client(ctx);
      const task = await c.submit("tscancel/wf");
      const cancelled = await c.cancel(task.id, "not needed");
      assert.equal(cancelled.state, "cancelled");
      const again = await rejection(c.cancel(task.id));
      assert.deepEqual([again.status, again.code], [409, "conflict"]);
      const audit = await c.audit(task.id);
      assert.ok(audit.some((e) => e.to === "cancelled" && e.reason === "not needed" && e.engine_id === "api:ts-client"), JSON.stringify(audit));

      const failed = await ctx.server.waitTask((await c.submit("tsretry/wf")).id);
      assert.equal(failed.state, "failed");
      const retried = await c.retry(failed.id, "once more");
      assert.equal(retried.state, "running");
      assert.ok((await c.audit(failed.id)).some((e) => e.from === "failed" && e.to === "running" && e.reason === "once more"));
      assert.equal((await ctx.server.waitTask(failed.id)).state, "failed");
      assert.equal((await rejection(c.retry(task.id))).status, 409);
    }),
  );

  it(
    "cancels, retries and deletes tasks in bulk",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(idle("tsbulk"));
      await ctx.server.registerWorkflow(failing("tsbulkf"));
      const c = await client(ctx);
      const idleIds = [];
      for (let i = 0; i < 3; i++) idleIds.push((await c.submit("tsbulk/wf", { i }, { tags: { batch: "b1" } })).id);
      const filter = { namespace: "tsbulk", tags: { batch: "b1" } };
      const dry = await c.cancelTasks({ filter, dry_run: true });
      assert.deepEqual([dry.matched, dry.done, dry.dry_run, dry.complete], [3, 0, true, true]);
      const done = await c.cancelTasks({ filter, reason: "bulk test" });
      assert.deepEqual([done.matched, done.done, done.complete], [3, 3, true]);
      for (const id of idleIds) assert.equal((await c.task(id)).state, "cancelled");

      const failed = await ctx.server.waitTask((await c.submit("tsbulkf/wf")).id);
      assert.equal(failed.state, "failed");
      const retried = await c.retryTasks({ ids: [failed.id], reason: "bulk retry" });
      assert.deepEqual([retried.matched, retried.done], [1, 1]);
      await ctx.server.waitTask(failed.id);

      const deleted = await c.deleteTasks({ ids: [...idleIds, failed.id] });
      assert.deepEqual([deleted.matched, deleted.done], [4, 4]);
      assert.equal((await rejection(c.task(idleIds[0] as number))).code, "not_found");
      const empty = await rejection(c.cancelTasks({}));
      assert.deepEqual([empty.status, empty.code], [400, "invalid_field"]);
    }),
  );

  it(
    "follows the event stream from a cursor, typed, and stops on abort",
    env.run(async (ctx) => {
      await ctx.server.registerWorkflow(idle("tsevents"));
      const c = await client(ctx);
      const task = await c.submit("tsevents/wf");
      await c.cancel(task.id, "seen");
      const seen: Event[] = [];
      const stop = new AbortController();
      for await (const e of c.events({ namespace: "tsevents", after: "start" }, { signal: stop.signal })) {
        assert.deepEqual(checkSchema("Event", e), []);
        seen.push(e);
        if (e.type === "task.cancelled") stop.abort();
      }
      assert.deepEqual(
        seen.map((e) => [e.type, e.task_id, e.step ?? ""]),
        [
          ["task.submitted", task.id, ""],
          ["step.ready", task.id, "a"],
          ["task.cancelled", task.id, ""],
        ],
      );
      assert.equal(seen[2]?.reason, "seen");
      assert.equal(seen[0]?.workflow, "tsevents/wf");

      // From a cursor: only what came after it, then live events as they happen.
      const later = await c.submit("tsevents/wf");
      const after: Event[] = [];
      for await (const e of c.events({ namespace: "tsevents", after: seen[1]?.cursor as string })) {
        after.push(e);
        if (e.task_id === later.id && e.type === "step.ready") await c.cancel(later.id);
        if (e.task_id === later.id && e.type === "task.cancelled") break;
      }
      assert.deepEqual(
        after.map((e) => [e.type, e.task_id]),
        [
          ["task.cancelled", task.id],
          ["step.cancelled", task.id],
          ["task.submitted", later.id],
          ["step.ready", later.id],
          ["task.cancelled", later.id],
        ],
      );
      const bad = await rejection(c.events({ after: "bogus" }).next());
      assert.deepEqual([bad.status, bad.field], [400, "after"]);
    }),
  );
});
