"""A weft remote worker in pure Python (standard library only).

    from weft_worker import Worker, Permanent

    worker = Worker("http://127.0.0.1:8080", token="weft_...", name="py", namespaces=["shop"])

    @worker.handler("shop.enrich")
    def enrich(step):
        order = step.input["order"]
        return {"total": step.deps["price"]["amount"] * 2}

    worker.run()   # until stop() or SIGINT/SIGTERM

A handler gets a Step (input, deps, config, checkpoint, attempt, ...) and
returns a JSON-encodable result. Raising an exception fails the attempt, and
the step's retry policy decides what follows; raise Permanent to fail without
retrying, or RetryAfter(seconds) to choose the delay. step.checkpoint(value)
saves progress that a later attempt starts from.

The protocol is described in docs/remote-workers.md.
"""

import json
import signal
import threading
import time
import traceback
import urllib.error
import urllib.request

__all__ = ["Worker", "Step", "Permanent", "RetryAfter", "APIError", "StaleLease"]


class APIError(Exception):
    """An error response of the weft API."""

    def __init__(self, status, code, message, field=None):
        super().__init__("%s %s: %s" % (status, code, message))
        self.status, self.code, self.message, self.field = status, code, message, field


class StaleLease(APIError):
    """The step is no longer held by this attempt (cancelled or taken over)."""


class Permanent(Exception):
    """Raise to fail the step at once, without retrying."""


class RetryAfter(Exception):
    """Raise to fail the attempt and retry after `seconds`."""

    def __init__(self, seconds, message="retry requested"):
        super().__init__(message)
        self.seconds = seconds


class Step:
    """What a handler sees of the step it runs."""

    def __init__(self, worker, raw):
        self._worker = worker
        self.raw = raw
        self.step_id = raw["step_id"]
        self.task_id = raw["task_id"]
        self.namespace = raw["namespace"]
        self.workflow = raw["workflow"]
        self.version = raw["version"]
        self.name = raw["step"]
        self.handler = raw["handler"]
        self.attempt = raw["attempt"]
        self.input = raw.get("input")
        self.deps = raw.get("deps") or {}
        self.config = raw.get("config")
        self.saved_checkpoint = raw.get("checkpoint")
        self.timeout = raw.get("timeout_ms", 0) / 1000.0 or None
        self.fence = raw["fence"]
        self.lost = threading.Event()  # set when the step was cancelled or taken over

    def checkpoint(self, value):
        """Save progress; a later attempt of this step sees it as saved_checkpoint."""
        self._worker._call("POST", "/checkpoint", {"fence": self.fence, "checkpoint": value})
        self.saved_checkpoint = value


class Worker:
    def __init__(self, url, token=None, name="python", namespaces=None, concurrency=4, wait=20.0, timeout=60.0):
        self.url = url.rstrip("/")
        self.token = token
        self.name = name
        self.namespaces = list(namespaces or [])
        self.concurrency = concurrency
        self.wait = wait
        self.timeout = timeout
        self.handlers = {}
        self.worker_id = None
        self.heartbeat_interval = 5.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._inflight = {}  # step_id -> Step
        self._slots = threading.Semaphore(concurrency)

    # -- registration of handlers -------------------------------------------

    def handler(self, name):
        """Decorator: register fn as the handler named `name`."""

        def register(fn):
            self.handlers[name] = fn
            return fn

        return register

    # -- HTTP ------------------------------------------------------------------

    def _request(self, method, path, body=None, timeout=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                payload = resp.read()
                return json.loads(payload) if payload else None
        except urllib.error.HTTPError as e:
            try:
                err = json.loads(e.read()).get("error", {})
            except ValueError:
                err = {}
            cls = StaleLease if err.get("code") == "stale_lease" else APIError
            raise cls(e.code, err.get("code", "http_%d" % e.code), err.get("message", str(e)), err.get("field")) from None

    def _call(self, method, suffix, body=None, timeout=None):
        return self._request(method, "/v1/workers/" + self.worker_id + suffix, body, timeout)

    # -- protocol ----------------------------------------------------------------

    def register(self):
        if not self.handlers:
            raise ValueError("register at least one handler with @worker.handler(name)")
        reg = self._request("POST", "/v1/workers", {"name": self.name, "namespaces": self.namespaces, "handlers": sorted(self.handlers)})
        self.worker_id = reg["worker_id"]
        self.heartbeat_interval = reg["heartbeat_interval_ms"] / 1000.0
        self.wait = min(self.wait, reg["max_wait_ms"] / 1000.0)
        return reg

    def _heartbeat_loop(self):
        while not self._stop.wait(self.heartbeat_interval):
            with self._lock:
                steps = list(self._inflight.values())
            try:
                resp = self._call("POST", "/heartbeat", {"steps": [s.fence for s in steps]})
            except APIError as e:
                if e.code == "worker_lost":
                    self._lost_all()
                continue
            except OSError:
                continue
            lost = {(f["step_id"], f["attempt"]) for f in resp.get("lost", [])}
            for s in steps:
                if (s.fence["step_id"], s.fence["attempt"]) in lost:
                    s.lost.set()

    def _lost_all(self):
        with self._lock:
            for s in self._inflight.values():
                s.lost.set()
            self._inflight.clear()
        self.register()

    def _run_step(self, step):
        try:
            fn = self.handlers[step.handler]
            try:
                result = fn(step)
            except Permanent as e:
                self._finish("/fail", step, {"error": str(e) or "permanent failure", "permanent": True})
            except RetryAfter as e:
                self._finish("/fail", step, {"error": str(e), "retry_after_ms": int(e.seconds * 1000)})
            except Exception as e:  # noqa: BLE001 - a handler's failure is reported, never fatal
                msg = "%s: %s" % (type(e).__name__, e)
                traceback.print_exc()
                self._finish("/fail", step, {"error": msg})
            else:
                self._finish("/complete", step, {"result": result})
        finally:
            with self._lock:
                self._inflight.pop(step.step_id, None)
            self._slots.release()

    def _finish(self, suffix, step, body):
        if step.lost.is_set():
            return  # cancelled or taken over: the outcome belongs to someone else
        body["fence"] = step.fence
        for attempt in range(5):
            try:
                self._call("POST", suffix, body)
                return
            except StaleLease:
                return
            except (APIError, OSError) as e:
                if isinstance(e, APIError) and e.status < 500:
                    print("weft worker: outcome of step %d refused: %s" % (step.step_id, e))
                    return
                time.sleep(min(0.1 * 2 ** attempt, 2))

    def run_once(self, wait=None):
        """Claim up to the free slots (waiting up to `wait` seconds), start their handlers, return how many."""
        free = 0
        while free < self.concurrency and self._slots.acquire(blocking=(free == 0)):
            free += 1
        body = {"handlers": sorted(self.handlers), "namespaces": self.namespaces, "max": free,
                "wait_ms": int((self.wait if wait is None else wait) * 1000)}
        try:
            resp = self._call("POST", "/claim", body, timeout=self.timeout + body["wait_ms"] / 1000.0)
        except APIError as e:
            for _ in range(free):
                self._slots.release()
            if e.code == "worker_lost":
                self._lost_all()
                return 0
            raise
        except BaseException:
            for _ in range(free):
                self._slots.release()
            raise
        steps = [Step(self, raw) for raw in resp["steps"]]
        for _ in range(free - len(steps)):
            self._slots.release()
        for step in steps:
            with self._lock:
                self._inflight[step.step_id] = step
            threading.Thread(target=self._run_step, args=(step,), daemon=True).start()
        return len(steps)

    def run(self, install_signals=True):
        """Register and work until stop() (or SIGINT/SIGTERM), then drain and deregister."""
        if install_signals and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: self.stop())
        self.register()
        hb = threading.Thread(target=self._heartbeat_loop, daemon=True)
        hb.start()
        backoff = 0.1
        while not self._stop.is_set():
            try:
                self.run_once(wait=min(self.wait, 2.0))
                backoff = 0.1
            except (APIError, OSError) as e:
                print("weft worker: claim failed: %s" % e)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        for _ in range(self.concurrency):  # drain: wait for running handlers
            self._slots.acquire()
        try:
            self._request("DELETE", "/v1/workers/" + self.worker_id)
        except (APIError, OSError):
            pass

    def stop(self):
        self._stop.set()
