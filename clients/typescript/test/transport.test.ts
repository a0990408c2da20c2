// Retries of the transport against a scripted HTTP server, the SSE reader,
// and the checks a step makes before sending anything. No weft server.

import assert from "node:assert/strict";
import { createServer, type IncomingHttpHeaders } from "node:http";
import type { AddressInfo } from "node:net";
import { describe, it, type TestContext } from "node:test";

import { APIError, Interrupted, Preempted, ServerUnavailable, Snooze, StaleLease, Step, Unauthorized, WorkerLost, formatDuration } from "../src/index.js";
import { failure, refusedOutcome, storable } from "../src/outcomes.js";
import { readEvents } from "../src/sse.js";
import { Transport } from "../src/transport.js";
import { checkSchema } from "../testing/schema.js";
import { freePort } from "../testing/weftserver.js";

type Answer = [status: number, headers: Record<string, string> | null, body: unknown];

interface Seen {
  at: number;
  path: string;
  body: unknown;
  headers: IncomingHttpHeaders;
}

/** Answers each request with the next answer of the script; the last one repeats. */
async function scripted(t: TestContext, script: Answer[]): Promise<{ seen: Seen[]; transport: Transport }> {
  const seen: Seen[] = [];
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () => {
      const text = Buffer.concat(chunks).toString();
      seen.push({ at: performance.now(), path: req.url ?? "", body: text ? JSON.parse(text) : undefined, headers: req.headers });
      const [status, headers, body] = (script.length > 1 ? script.shift() : script[0]) as Answer;
      const data = body === null ? "" : JSON.stringify(body);
      res.writeHead(status, { "Content-Type": "application/json", ...headers });
      res.end(data);
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  t.after(() => new Promise((r) => server.close(r)));
  server.closeIdleConnections();
  const transport = new Transport(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { token: "tok", timeoutMs: 5000 });
  transport.backoffInitialMs = 20;
  transport.backoffMaxMs = 100;
  return { seen, transport };
}

const err = (code: string, message = "x") => ({ error: { code, message } });
const log = { debug() {}, info() {}, warn() {}, error() {} };

describe("Transport", () => {
  it("retries 5xx and sends the token", async (t) => {
    const { seen, transport } = await scripted(t, [[500, null, err("internal")], [502, null, null], [200, null, { state: "completed" }]]);
    assert.deepEqual(await transport.call("POST", "/v1/x", { a: 1 }, { windowMs: 5000, log }), { state: "completed" });
    assert.equal(seen.length, 3);
    assert.deepEqual(seen[0]?.body, { a: 1 });
    assert.equal(seen[0]?.headers.authorization, "Bearer tok");
  });

  it("honours Retry-After on 503 and 429", async (t) => {
    for (const status of [503, 429]) {
      const { seen, transport } = await scripted(t, [[status, { "Retry-After": "1" }, err("overloaded")], [204, null, null]]);
      assert.equal(await transport.call("POST", "/v1/x", {}, { windowMs: 5000, log }), undefined);
      assert.ok((seen[1]?.at ?? 0) - (seen[0]?.at ?? 0) >= 950, `${status}: waited as Retry-After says`);
    }
  });

  it("takes 4xx as final at once", async (t) => {
    const cases: [number, string, typeof APIError][] = [
      [409, "stale_lease", StaleLease],
      [409, "worker_lost", WorkerLost],
      [401, "unauthenticated", Unauthorized],
      [403, "forbidden", Unauthorized],
      [400, "invalid_field", APIError],
      [404, "not_found", APIError],
    ];
    for (const [status, code, Class] of cases) {
      const { seen, transport } = await scripted(t, [[status, null, err(code, "nope")]]);
      const e = await transport.call("POST", "/v1/x", {}, { windowMs: 5000, log }).catch((e: unknown) => e);
      assert.ok(e instanceof Class, `${code}: ${String(e)}`);
      assert.deepEqual([e.status, e.code, e.message], [status, code, "nope"]);
      assert.equal(seen.length, 1, code);
    }
  });

  it("names a response that is not weft's error by its status", async (t) => {
    const { transport } = await scripted(t, [[418, null, "short and stout"]]);
    const e = await transport.request("GET", "/v1/x").catch((e: unknown) => e);
    assert.ok(e instanceof APIError);
    assert.equal(e.code, "http_418");
  });

  it("gives up after the window with the last error", async (t) => {
    const { seen, transport } = await scripted(t, [[500, null, err("internal", "db down")]]);
    const t0 = performance.now();
    const e = await transport.call("POST", "/v1/x", {}, { windowMs: 500, what: "complete of step 1", log }).catch((e: unknown) => e);
    assert.ok(e instanceof ServerUnavailable, String(e));
    assert.ok(performance.now() - t0 >= 500);
    assert.match(e.message, /db down/);
    assert.match(e.message, /complete of step 1/);
    assert.ok(seen.length > 3);
  });

  it("retries a refused connection for the window", async () => {
    const transport = new Transport(`http://127.0.0.1:${await freePort()}`, { timeoutMs: 1000 });
    transport.backoffInitialMs = 20;
    transport.backoffMaxMs = 100;
    const t0 = performance.now();
    const e = await transport.call("POST", "/v1/x", {}, { windowMs: 400, log }).catch((e: unknown) => e);
    assert.ok(e instanceof ServerUnavailable, String(e));
    assert.ok(performance.now() - t0 >= 400);
    assert.equal(e.lastError.name, "TransportError");
    assert.ok(e.attempts > 2);
  });

  it("stops retrying when its signal is aborted", async (t) => {
    const { transport } = await scripted(t, [[500, null, err("internal")]]);
    const stop = AbortSignal.timeout(200);
    await assert.rejects(transport.call("POST", "/v1/x", {}, { windowMs: 30_000, signal: stop, log }), Interrupted);
  });

  it("calls a body function before each attempt", async (t) => {
    const { seen, transport } = await scripted(t, [[500, null, err("internal")], [200, null, { lost: [] }]]);
    let n = 0;
    await transport.call("POST", "/v1/x", () => ({ steps: [++n] }), { windowMs: 5000, log });
    assert.deepEqual(
      seen.map((s) => s.body),
      [{ steps: [1] }, { steps: [2] }],
    );
  });
});

describe("readEvents", () => {
  it("parses ids, types, multi-line data and comments across chunks", async () => {
    const text = "retry: 2000\n\n: keep-alive\r\nid: 1.2\nevent: task.submitted\ndata: {\"a\":\ndata: 1}\n\nid: 3\r\ndata:x\r\n\r\ndata: cut";
    const bytes = new TextEncoder().encode(text);
    async function* chunks() {
      for (let i = 0; i < bytes.length; i += 7) yield bytes.slice(i, i + 7);
    }
    const got = [];
    for await (const e of readEvents(chunks())) got.push(e);
    assert.deepEqual(got, [
      { id: "1.2", event: "task.submitted", data: '{"a":\n1}' },
      { id: "3", event: "message", data: "x" },
    ]);
  });
});

describe("Step", () => {
  const reporter = { checkpoint: async () => {}, progress: async () => true };
  const step = (raw: object = {}) =>
    new Step(
      {
        step_id: 1,
        task_id: 2,
        namespace: "n",
        workflow: "w",
        version: "1",
        step: "s",
        handler: "h",
        attempt: 1,
        input: null,
        deps: {},
        fence: { step_id: 1, attempt: 1, lease_id: "9" },
        ...raw,
      },
      "w",
      reporter,
    );

  it("checks the progress fraction before sending", async () => {
    const s = step();
    for (const bad of [-0.01, 1.01, NaN, true, "0.5", null]) {
      await assert.rejects(s.progress(bad as number), RangeError, String(bad));
    }
    await assert.rejects(s.progress(0.5, 3 as unknown as string), TypeError);
    assert.equal(await s.progress(0), true);
    assert.equal(await s.progress(1, "done"), true);
  });

  it("takes its timeout and checkpoint from the claim", () => {
    const s = step({ timeout_ms: 1500, checkpoint: { k: 1 } });
    assert.equal(s.timeoutMs, 1500);
    assert.ok(Math.abs((s.timeLeft() ?? 0) - 1500) < 200);
    assert.deepEqual(s.claimedCheckpoint, { k: 1 });
    assert.deepEqual(s.savedCheckpoint, { k: 1 });
    const none = step();
    assert.equal(none.timeoutMs, null);
    assert.equal(none.timeLeft(), null);
    assert.equal(none.cancelled, false);
    assert.equal(none.signal.aborted, false);
  });

  it("wakes wait() and throws once preempted, and still checkpoints", async () => {
    const s = step();
    assert.equal(await s.wait(0), false);
    s.throwIfPreempted();
    setTimeout(() => s.markPreempted('preempted by task 2 step "alert" (priority 5)'), 50);
    assert.equal(await s.wait(10_000), true);
    assert.equal(s.preempted, true);
    assert.equal(s.cancelled, false, "preempted is not cancelled: the handler may still checkpoint");
    assert.ok(s.signal.reason instanceof Preempted);
    assert.throws(() => s.throwIfPreempted(), (e: unknown) => e instanceof Preempted && e.message.includes('step "alert"'));
    await s.checkpoint({ row: 1 });
    assert.deepEqual(s.savedCheckpoint, { row: 1 });
  });

  it("refuses reports once cancelled", async () => {
    const s = step();
    s.markCancelled("timed out");
    assert.ok(s.signal.reason instanceof StaleLease);
    await assert.rejects(s.checkpoint({ too: "late" }), StaleLease);
    await assert.rejects(s.progress(0.5), StaleLease);
  });
});

describe("outcomes", () => {
  it("formats durations as Go does", () => {
    assert.deepEqual(
      [300, 1000, 1500, 90_000, 3_600_000].map(formatDuration),
      ["300ms", "1s", "1.5s", "1m30s", "1h0m0s"],
    );
  });

  it("reports a Snooze as a fail with snooze_ms, from 1 ms to a week", () => {
    assert.deepEqual(failure(new Snooze(1500, "not yet")), { kind: "fail", body: { error: "not yet", snooze_ms: 1500 } });
    assert.deepEqual(failure(new Snooze(0)), { kind: "fail", body: { error: "snoozed", snooze_ms: 1 } });
    assert.deepEqual(failure(new Snooze(1e12)), { kind: "fail", body: { error: "snoozed", snooze_ms: 604_800_000 } });
  });

  it("replaces NULs and lone surrogates in refused reports", () => {
    assert.equal(storable("a\0b\udcffc\ud83d\ude00"), "a\ufffdb\ufffdc\ud83d\ude00");
    const refusal = new APIError(413, "body_too_large", "too big");
    assert.deepEqual(refusedOutcome({ kind: "complete", body: { result: 1 } }, refusal), {
      error: "the server refused the result: 413 body_too_large: too big",
      permanent: true,
    });
    assert.deepEqual(refusedOutcome({ kind: "fail", body: { error: "bad\0", permanent: true } }, refusal), {
      error: "bad\ufffd (the server refused the report: 413 body_too_large: too big)",
      permanent: true,
    });
  });
});

describe("the tests' openapi.json checker", () => {
  it("finds missing fields, wrong types, values outside an enum and unknown fields", () => {
    assert.deepEqual(checkSchema("Fence", { step_id: 1, attempt: 1, lease_id: "2" }), []);
    assert.deepEqual(checkSchema("Fence", { step_id: "1", attempt: 0 }), [
      "$: required lease_id is missing",
      "$.step_id: string, want integer",
      "$.attempt: 0 < minimum 1",
    ]);
    assert.deepEqual(checkSchema("Complete", { fence: { step_id: 1, attempt: 1, lease_id: "2" }, extra: 1 }), ["$: extra is not in the schema"]);
    assert.deepEqual(checkSchema("ErrorBody", { error: { code: "oops", message: "m" } }).length, 1);
  });
});
