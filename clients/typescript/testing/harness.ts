// One `weft serve` per test file, and per test a log capture, in-process
// workers stopped when the test ends, and the worker log appended to a
// failure's message.

import assert from "node:assert/strict";
import { after, before } from "node:test";

import { Worker, type AuditEntry, type DurableFunction, type Handler, type Logger, type WorkerOptions } from "../src/index.js";
import { checkingFetch } from "./schema.js";
import { WeftServer, waitFor } from "./weftserver.js";

/** Collects what a worker logs. */
export class LogCapture implements Logger {
  readonly lines: string[] = [];
  debug = (m: string) => this.add("debug", m);
  info = (m: string) => this.add("info", m);
  warn = (m: string) => this.add("warn", m);
  error = (m: string) => this.add("error", m);

  /** The first line holding every word, or undefined. */
  find(...words: string[]): string | undefined {
    return this.lines.find((line) => words.every((w) => line.includes(w)));
  }

  private add(level: string, message: string): void {
    this.lines.push(`${level}: ${message}`);
    if (process.env["WEFT_TEST_LOG"]) console.error(`${level}: ${message}`);
  }
}

export interface RunningWorker {
  worker: Worker;
  /** What run() rejected with, if it did. */
  errors: unknown[];
  /** Resolves when run() returns. */
  done: Promise<void>;
}

export interface Ctx {
  server: WeftServer;
  /** A key with workers:connect. */
  workerToken: string;
  logs: LogCapture;
  /** A fetch that checks requests and responses against openapi.json: the test fails on a disagreement. */
  fetch: typeof fetch;
  /** Run a Worker serving handlers (and durable functions) in namespace until the test ends; resolves once it registered. */
  startWorker(
    namespace: string,
    handlers: Record<string, Handler>,
    options?: WorkerOptions,
    functions?: Record<string, DurableFunction>,
  ): Promise<RunningWorker>;
  /** Run fn when the test ends (last registered first). */
  cleanup(fn: () => unknown): void;
  /** The (from, to, reason, engine_id) of a step's audit entries. */
  auditOf(taskId: number, step: string): Promise<Pick<AuditEntry, "from" | "to" | "reason" | "engine_id" | "attempt">[]>;
}

export interface Env {
  readonly server: WeftServer;
  readonly workerToken: string;
  /** Run a test body with its context; its workers and cleanups end with it. */
  run(body: (ctx: Ctx) => Promise<void>): () => Promise<void>;
}

/** Start one server for the file (before its tests) and close it after them. */
export function serverEnv(): Env {
  let server: WeftServer | undefined;
  let workerToken = "";
  before(async () => {
    server = await WeftServer.start();
    workerToken = await server.createKey("ts-worker", "workers:connect");
  });
  after(async () => {
    await server?.close();
  });
  const env: Env = {
    get server() {
      assert.ok(server, "the server did not start");
      return server;
    },
    get workerToken() {
      return workerToken;
    },
    run: (body) => async () => {
      const logs = new LogCapture();
      const problems: string[] = [];
      const cleanups: (() => unknown)[] = [];
      const ctx: Ctx = {
        server: env.server,
        workerToken,
        logs,
        fetch: checkingFetch(problems),
        cleanup: (fn) => cleanups.push(fn),
        startWorker: (namespace, handlers, options = {}, functions = {}) => startWorker(ctx, namespace, handlers, options, functions),
        auditOf: async (taskId, step) =>
          (await env.server.audit(taskId))
            .filter((e) => e.step === step)
            .map(({ from, to, reason, engine_id, attempt }) => ({ from, to, reason, engine_id, attempt })),
      };
      let failure: unknown;
      try {
        await body(ctx);
      } catch (err) {
        failure = err;
      }
      for (const fn of cleanups.reverse()) {
        try {
          await fn();
        } catch (err) {
          failure ??= err;
        }
      }
      if (failure === undefined && problems.length > 0) {
        failure = new Error(`requests or responses disagree with openapi.json:\n${[...new Set(problems)].join("\n")}`);
      }
      if (failure !== undefined) {
        if (failure instanceof Error && logs.lines.length > 0) failure.message += `\n--- worker log ---\n${logs.lines.join("\n")}`;
        throw failure;
      }
    },
  };
  return env;
}

async function startWorker(
  ctx: Ctx,
  namespace: string,
  handlers: Record<string, Handler>,
  options: WorkerOptions,
  functions: Record<string, DurableFunction>,
): Promise<RunningWorker> {
  const worker = new Worker(ctx.server.url, {
    token: ctx.workerToken,
    name: namespace,
    namespaces: [namespace],
    heartbeatIntervalMs: 500,
    drainTimeoutMs: 5000,
    logger: ctx.logs,
    fetch: ctx.fetch,
    ...options,
  });
  for (const [name, fn] of Object.entries(handlers)) worker.handle(name, fn);
  for (const [name, fn] of Object.entries(functions)) worker.function(name, fn);
  const errors: unknown[] = [];
  const done = worker.run({ signals: false }).catch((err: unknown) => void errors.push(err));
  ctx.cleanup(async () => {
    worker.stop();
    await within(done, 15_000, "the worker to stop");
  });
  await waitFor(() => worker.workerId !== undefined || errors.length > 0, 10_000, "the worker to register");
  assert.deepEqual(errors, []);
  return { worker, errors, done };
}

/** promise, or a failure naming what did not happen within ms. */
export async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms / 1000}s waiting for ${what}`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
