// HTTP/JSON transport to a weft server, with retries.
//
// Transport.request sends one request. Transport.call retries it, with
// exponential backoff and jitter, on what may pass (connection errors,
// timeouts, 5xx, 429, honouring Retry-After) until a window of time is over;
// any other error response is final at once.

import {
  APIError,
  Interrupted,
  ServerUnavailable,
  StaleLease,
  TransportError,
  Unauthorized,
  WorkerLost,
  describe,
} from "./errors.js";
import { defaultLogger, type Logger } from "./log.js";
import { isErrorCode } from "./types.js";

export interface TransportOptions {
  /** An API key (weft_…) or a JWT, sent as Authorization: Bearer. */
  token?: string | undefined;
  /** How long each HTTP attempt may take, in milliseconds (default 30000). */
  timeoutMs?: number | undefined;
  userAgent?: string | undefined;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch | undefined;
}

export interface RequestOptions {
  /** This attempt's time limit (default: the transport's). 0: none. */
  timeoutMs?: number | undefined;
  /** Aborting it cuts the request short with Interrupted. */
  signal?: AbortSignal | undefined;
  headers?: Record<string, string> | undefined;
}

export interface CallOptions extends RequestOptions {
  /** How long to retry what may pass, in milliseconds. */
  windowMs: number;
  /** What the request is, in log lines and errors. */
  what?: string | undefined;
  /** Log the retries at debug level instead of warn. */
  quiet?: boolean | undefined;
  log?: Logger | undefined;
}

/** Whether a request that failed with err may succeed if sent again. */
export function retryable(err: unknown): boolean {
  if (err instanceof APIError) return err.status >= 500 || err.status === 429;
  return err instanceof TransportError;
}

/** Milliseconds from a Retry-After header (delta-seconds or an HTTP date). */
export function parseRetryAfter(value: string | null): number | undefined {
  if (!value?.trim()) return undefined;
  const seconds = Number(value.trim());
  if (Number.isFinite(seconds)) return Math.max(0, seconds * 1000);
  const when = Date.parse(value);
  return Number.isNaN(when) ? undefined : Math.max(0, when - Date.now());
}

/** The APIError (or subclass) for an error response. */
export function apiError(status: number, statusText: string, payload: string, headers?: Headers): APIError {
  let err: { code?: unknown; message?: unknown; field?: unknown } = {};
  try {
    const body: unknown = payload ? JSON.parse(payload) : {};
    if (isObject(body) && isObject(body["error"])) err = body["error"];
  } catch {
    // Not JSON (a proxy's page, say): described by its status.
  }
  const code = isErrorCode(err.code) ? err.code : (`http_${status}` as const);
  const message = typeof err.message === "string" && err.message ? err.message : payload.slice(0, 200) || statusText;
  const field = typeof err.field === "string" ? err.field : undefined;
  const retryAfterMs = parseRetryAfter(headers?.get("Retry-After") ?? null);
  const Class =
    code === "stale_lease" ? StaleLease : code === "worker_lost" ? WorkerLost : status === 401 || status === 403 ? Unauthorized : APIError;
  return new Class(status, code, message, field, retryAfterMs);
}

export class Transport {
  readonly url: string;
  readonly token: string | undefined;
  readonly timeoutMs: number;
  /** The delays between attempts of call(): from backoffInitialMs, doubling up to backoffMaxMs. */
  backoffInitialMs = 200;
  backoffMaxMs = 5000;
  private readonly userAgent: string;
  private readonly fetch: typeof fetch;

  constructor(url: string, options: TransportOptions = {}) {
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new TypeError(`server URL ${JSON.stringify(url)}: want http(s)://host[:port]`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new TypeError(`server URL ${JSON.stringify(url)}: want http(s)://host[:port]`);
    }
    this.url = url.replace(/\/+$/, "");
    this.token = options.token;
    this.timeoutMs = options.timeoutMs ?? 30_000;
    this.userAgent = options.userAgent ?? "weft-client-typescript";
    this.fetch = options.fetch ?? globalThis.fetch;
  }

  /**
   * Send one request and return its response once its status is 2xx.
   * Throws APIError (or a subclass) for an error response, TransportError
   * when no response came, Interrupted when options.signal was aborted.
   */
  async send(method: string, path: string, body?: unknown, options: RequestOptions = {}): Promise<Response> {
    const what = `${method} ${path}`;
    const headers: Record<string, string> = { Accept: "application/json", "User-Agent": this.userAgent, ...options.headers };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    if (this.token) headers["Authorization"] = `Bearer ${this.token}`;
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const signals = [options.signal, timeoutMs > 0 ? AbortSignal.timeout(timeoutMs) : undefined].filter((s) => s !== undefined);
    const init: RequestInit = { method, headers, signal: AbortSignal.any(signals) };
    if (body !== undefined) init.body = JSON.stringify(body);
    let resp: Response;
    try {
      resp = await this.fetch(this.url + path, init);
    } catch (err) {
      throw this.failure(what, err, options.signal, timeoutMs);
    }
    if (resp.ok) return resp;
    const payload = await this.read(what, resp, options.signal, timeoutMs);
    throw apiError(resp.status, resp.statusText, payload, resp.headers);
  }

  /** Send one request; return its decoded JSON body (undefined if empty). */
  async request<T>(method: string, path: string, body?: unknown, options: RequestOptions = {}): Promise<T> {
    const what = `${method} ${path}`;
    const timeoutMs = options.timeoutMs ?? this.timeoutMs;
    const resp = await this.send(method, path, body, options);
    const payload = await this.read(what, resp, options.signal, timeoutMs);
    if (!payload) return undefined as T;
    try {
      return JSON.parse(payload) as T;
    } catch (err) {
      throw new TransportError(`${what}: the ${resp.status} response is not JSON: ${describe(err)}`);
    }
  }

  /**
   * Send a request, retrying what may pass for options.windowMs. body may be
   * a function, called before each attempt (a heartbeat lists the steps held
   * at the time of the attempt). A Retry-After of the server is honoured.
   * After the window one last attempt is made, then ServerUnavailable is
   * thrown. Aborting options.signal ends the retries with Interrupted.
   * Error responses other than 5xx/429 throw their APIError at once.
   */
  async call<T>(method: string, path: string, body: unknown, options: CallOptions): Promise<T> {
    const what = options.what ?? `${method} ${path}`;
    const log = options.log ?? defaultLogger;
    const start = performance.now();
    const giveUp = start + options.windowMs;
    let failures = 0;
    for (;;) {
      if (options.signal?.aborted) throw new Interrupted(what);
      let err: unknown;
      try {
        return await this.request<T>(method, path, typeof body === "function" ? body() : body, options);
      } catch (e) {
        if (!retryable(e)) throw e;
        err = e;
      }
      failures++;
      const now = performance.now();
      if (options.signal?.aborted) throw new Interrupted(what);
      if (now >= giveUp) throw new ServerUnavailable(what, now - start, failures, err as Error);
      const asked = err instanceof APIError ? err.retryAfterMs : undefined;
      const delay = Math.min(asked ?? this.backoff(failures), giveUp - now);
      const line = `${what} failed (${describe(err)}): retrying in ${seconds(delay)} (giving up in ${seconds(giveUp - now)})`;
      if (options.quiet) log.debug(line);
      else log.warn(line);
      if (await sleep(delay, options.signal)) throw new Interrupted(what);
    }
  }

  /** The delay before the next attempt after `failures` failures: exponential, capped, with "equal jitter". */
  backoff(failures: number): number {
    const d = Math.min(this.backoffMaxMs, this.backoffInitialMs * 2 ** Math.min(failures - 1, 30));
    return d / 2 + (Math.random() * d) / 2;
  }

  private async read(what: string, resp: Response, signal: AbortSignal | undefined, timeoutMs: number): Promise<string> {
    try {
      return await resp.text();
    } catch (err) {
      throw this.failure(what, err, signal, timeoutMs);
    }
  }

  private failure(what: string, err: unknown, signal: AbortSignal | undefined, timeoutMs: number): Error {
    if (signal?.aborted) return new Interrupted(what);
    if (err instanceof Error && err.name === "TimeoutError") {
      return new TransportError(`${what}: no answer within ${seconds(timeoutMs)}`, { cause: err });
    }
    const cause = err instanceof Error && err.cause instanceof Error ? err.cause : err;
    return new TransportError(`${what}: ${cause instanceof Error ? cause.message : String(cause)}`, { cause: err });
  }
}

/** Sleep ms milliseconds; resolves true at once if signal is (or gets) aborted. */
export function sleep(ms: number, signal?: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(true);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(true);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(false);
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

function seconds(ms: number): string {
  return `${(Math.max(0, ms) / 1000).toFixed(1)}s`;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
