// A real weft server for the tests: built from this checkout, run on a
// throwaway SQLite database on a loopback port, killed and restarted at will.
//
// WEFT_BIN names a built weft binary to use instead of `go build`
// (scripts/run-tests.mjs builds one for the whole run).

import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, openSync, closeSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import type { AuditEntry, Task, TaskStep } from "../src/index.js";

const run = promisify(execFile);

/** The repository root: this file runs as clients/typescript/dist/testing/weftserver.js. */
export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..");

let binary: Promise<string> | undefined;

/** The weft binary: WEFT_BIN, else built once for this process. */
export function weftBinary(): Promise<string> {
  binary ??= (async () => {
    if (process.env["WEFT_BIN"]) return process.env["WEFT_BIN"];
    const dir = mkdtempSync(join(tmpdir(), "weft-ts-bin-"));
    process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, "weft");
    await run("go", ["build", "-o", path, "./cmd/weft"], { cwd: REPO }).catch((err: Error & { stderr?: string }) => {
      throw new Error(`go build ./cmd/weft failed (set WEFT_BIN to use a built weft): ${err.stderr ?? err.message}`);
    });
    return path;
  })();
  return binary;
}

export function freePort(): Promise<number> {
  return new Promise((resolvePort, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === "object" && addr ? resolvePort(addr.port) : reject(new Error("no port"))));
    });
  });
}

/** Poll predicate until it returns a truthy value; return it, or fail after timeoutMs. */
export async function waitFor<T>(predicate: () => T | Promise<T>, timeoutMs: number, what: string, intervalMs = 50): Promise<NonNullable<T>> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    const value = await predicate();
    if (value) return value as NonNullable<T>;
    if (performance.now() > deadline) throw new Error(`timed out after ${(timeoutMs / 1000).toFixed(1)}s waiting for ${what}`);
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}

/** An error response of the raw api() helper. */
export class HTTPError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`${status}: ${body}`);
  }
}

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const proc of running) proc.kill("SIGKILL");
});

/** `weft serve` on a temporary database; adminToken has every permission. */
export class WeftServer {
  readonly dir = mkdtempSync(join(tmpdir(), "weft-ts-"));
  readonly db = join(this.dir, "weft.db");
  readonly logPath = join(this.dir, "serve.log");
  url = "";
  adminToken = "";
  private proc: ChildProcess | undefined;

  private constructor(
    readonly bin: string,
    readonly port: number,
  ) {
    this.url = `http://127.0.0.1:${port}`;
  }

  /** Build (once), create the database and an admin key, and start serving. */
  static async start(): Promise<WeftServer> {
    const server = new WeftServer(await weftBinary(), await freePort());
    server.adminToken = await server.createKey("admin", "admin:*");
    await server.restart();
    return server;
  }

  async weft(...args: string[]): Promise<string> {
    const { stdout } = await run(this.bin, ["--db", this.db, ...args], { timeout: 60_000 });
    return stdout;
  }

  /** Create an API key with `weft keys create`; return its secret. */
  async createKey(name: string, permissions: string): Promise<string> {
    const out = await this.weft("keys", "create", "--name", name, "--permissions", permissions);
    return out.trim().split("\n").at(-1) ?? "";
  }

  /** Start (or restart) `weft serve` on the same database and port. */
  async restart(timeoutMs = 20_000): Promise<void> {
    const log = openSync(this.logPath, "a");
    const proc = spawn(this.bin, ["--db", this.db, "serve", "--addr", `127.0.0.1:${this.port}`, "--drain", "2s", "--heartbeat-interval", "1s"], {
      stdio: ["ignore", log, log],
    });
    closeSync(log);
    this.proc = proc;
    running.add(proc);
    proc.once("exit", () => running.delete(proc));
    await waitFor(
      async () => {
        if (proc.exitCode !== null) throw new Error(`weft serve exited with ${proc.exitCode}:\n${this.log()}`);
        try {
          return (await fetch(`${this.url}/health/ready`, { signal: AbortSignal.timeout(1000) })).status === 200;
        } catch {
          return false;
        }
      },
      timeoutMs,
      "weft serve to be ready",
    );
  }

  /** SIGKILL the server, as a crash would. */
  kill(): Promise<void> {
    return this.signal("SIGKILL");
  }

  async close(): Promise<void> {
    await this.signal("SIGTERM");
    rmSync(this.dir, { recursive: true, force: true });
  }

  log(): string {
    try {
      return readFileSync(this.logPath, "utf8");
    } catch {
      return "";
    }
  }

  private async signal(sig: NodeJS.Signals): Promise<void> {
    const proc = this.proc;
    if (proc === undefined || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise((r) => proc.once("exit", r));
    proc.kill(sig);
    await exited;
  }

  // -- REST, without the client under test --------------------------------------------

  async api<T = unknown>(method: string, path: string, body?: unknown, options: { token?: string; headers?: Record<string, string> } = {}): Promise<T> {
    const headers: Record<string, string> = { Authorization: `Bearer ${options.token ?? this.adminToken}`, ...options.headers };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const init: RequestInit = { method, headers, signal: AbortSignal.timeout(30_000) };
    if (body !== undefined) init.body = JSON.stringify(body);
    const resp = await fetch(this.url + path, init);
    const text = await resp.text();
    if (!resp.ok) throw new HTTPError(resp.status, text);
    return (text ? JSON.parse(text) : undefined) as T;
  }

  registerWorkflow(template: string): Promise<unknown> {
    return this.api("POST", "/v1/workflows", { template });
  }

  async submit(workflow: string, input: unknown = {}, headers?: Record<string, string>): Promise<number> {
    const task = await this.api<Task>("POST", "/v1/tasks", { workflow, input }, headers ? { headers } : {});
    return task.id;
  }

  task(id: number): Promise<Task> {
    return this.api<Task>("GET", `/v1/tasks/${id}`);
  }

  async audit(id: number): Promise<AuditEntry[]> {
    return (await this.api<{ audit: AuditEntry[] }>("GET", `/v1/tasks/${id}/audit`)).audit;
  }

  /** Poll until the task ends; return it. */
  waitTask(id: number, timeoutMs = 20_000): Promise<Task> {
    const done = ["completed", "failed", "cancelled", "expired"];
    return waitFor(
      async () => {
        const task = await this.task(id);
        return done.includes(task.state) ? task : undefined;
      },
      timeoutMs,
      `task ${id} to end`,
    );
  }
}

export function stepNamed(task: Task, name: string): TaskStep {
  const step = task.steps?.find((s) => s.name === name);
  if (step === undefined) throw new Error(`task ${task.id} has no step ${JSON.stringify(name)}: ${JSON.stringify(task)}`);
  return step;
}

/** A workflow template of one namespace, named wf, version 1. */
export function workflow(namespace: string, steps: string): string {
  return `namespace: ${namespace}\nname: wf\nversion: "1"\nsteps:\n${steps}`;
}
