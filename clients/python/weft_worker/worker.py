"""Worker: registers with a weft server, claims steps, runs their handlers on
threads, heartbeats every step it holds, and reports each outcome.

The protocol is described in docs/remote-workers.md. What the worker
guarantees on its side:

- every report (claim, heartbeat, complete, fail, checkpoint, progress) is
  retried on connection errors, timeouts and 5xx (honouring Retry-After)
  for at least the lease period; a 4xx is final at once, and a complete or
  fail refused with one is reported as a failed attempt instead (never
  dropped, which would have the step reclaimed and run again);
- every heartbeat lists every step the worker holds: claimed and not yet
  settled, including those whose outcome is still being reported;
- a step whose timeout passes is reported failed ("step timed out after
  ...") and its handler's late return is ignored;
- a worker the server no longer knows registers again; bad credentials stop
  the worker with Unauthorized;
- every heartbeat says how many slots are free, with its handlers and
  namespaces: when it has none, the server may ask it to stop a
  preemptible step for more urgent work (step.preempted is set); the
  handler's exception is then reported as a preemption (fail with
  preempted: true), a result it returns anyway as usual;
- on stop() (SIGINT/SIGTERM in run()) it stops claiming, waits for running
  handlers up to drain_timeout, and deregisters.
"""

import json
import logging
import signal
import threading
import time

from . import function
from .errors import APIError, Permanent, RetryAfter, ServerUnavailable, Snooze, StaleLease, Unauthorized, WorkerLost
from .step import REPORTING, RUNNING, SETTLED, Step
from .transport import Interrupted, Transport

__all__ = ["Worker", "format_duration"]

_WEEK_MS = 7 * 24 * 3600 * 1000


class _FunctionHandler:
    """A durable function as a handler: its function step replays it and
    reports new calls or its result; a step call runs its code."""

    def __init__(self, fn):
        self.fn = fn

    def run(self, step):
        if step.kind == "call":
            result = function.run_call(self.fn, step)
        elif step.kind == "function":
            what, value = function.drive(self.fn, step)
            if what == "calls":
                return ("/calls", {"calls": value})
            result = value
        else:
            raise Permanent("step %r is not a durable function's (kind %r): its workflow's step must be of type function"
                            % (step.name, step.kind))
        json.dumps(result, allow_nan=False)
        return ("/complete", {"result": result})


def format_duration(seconds):
    """A duration as Go prints it: 500ms, 1s, 1.5s, 2m0s, 1h0m0s."""
    ms = int(round(seconds * 1000))
    if ms < 1000:
        return "%dms" % ms
    h, rem = divmod(ms, 3600000)
    m, rem = divmod(rem, 60000)
    s = ("%.3f" % (rem / 1000.0)).rstrip("0").rstrip(".")
    if h:
        return "%dh%dm%ss" % (h, m, s)
    if m:
        return "%dm%ss" % (m, s)
    return "%ss" % s


class Worker:
    """A remote worker of a weft server.

    url, token: the server and an API key (or JWT) with workers:connect.
    name: the worker's name (letters, digits, '_', '.', '-'); its id is
    derived from it. namespaces: those it serves (None: all).
    concurrency: handlers run at once. wait: longest claim long poll, in
    seconds (the server caps it). timeout: seconds each HTTP attempt may
    take. drain_timeout: on stop, how long to wait for running handlers.
    register_timeout: how long the first registration is retried while the
    server is unreachable (None: until stopped). heartbeat_interval: beat
    at least this often (default: as the server says). logger: a
    logging.Logger (default "weft_worker").
    """

    def __init__(self, url, token=None, name="python", namespaces=None, concurrency=4, wait=20.0, timeout=30.0,
                 drain_timeout=30.0, register_timeout=60.0, heartbeat_interval=None, logger=None):
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1, got %r" % (concurrency,))
        self.url = url.rstrip("/")
        self.token = token
        self.name = name
        self.namespaces = list(namespaces or [])
        self.concurrency = concurrency
        self.wait = wait
        self.timeout = timeout
        self.drain_timeout = drain_timeout
        self.register_timeout = register_timeout
        self.log = logger or logging.getLogger("weft_worker")
        self.handlers = {}
        self.worker_id = None
        # Until registration tells: the engine defaults.
        self.lease_ttl = 30.0
        self.heartbeat_interval = heartbeat_interval or 5.0
        self.max_wait = None
        self._heartbeat_override = heartbeat_interval
        self._transport = Transport(self.url, token, timeout)
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._steps = {}  # Step.key -> Step, for every step held (running or reporting)
        self._reg_lock = threading.Lock()
        self._stopping = threading.Event()  # stop claiming, drain
        self._abort = threading.Event()  # do not wait for handlers
        self._hb_stop = threading.Event()
        self._fatal = None
        self._progress_unsupported = False
        self._load_unsupported = False  # an older server refuses "free" in heartbeats

    # -- handlers ----------------------------------------------------------------

    def handler(self, name):
        """Decorator: serve the handler `name` with fn(step) -> JSON result."""

        def register(fn):
            self.handlers[name] = fn
            return fn

        return register

    def function(self, name):
        """Decorator: serve the durable function whose workflow's function
        step has handler `name` (a workflow with one step of type
        function): fn(f, input) -> JSON result, where f is a
        weft_worker.Function whose calls (f.step, f.go, f.sleep,
        f.wait_signal, f.child) are recorded as steps of the task."""

        def register(fn):
            self.handlers[name] = _FunctionHandler(fn)
            return fn

        return register

    # -- registration ----------------------------------------------------------

    def register(self, window=None):
        """Register the worker (retrying while the server is unreachable, for
        `window` seconds, default register_timeout) and return the answer."""
        if not self.handlers:
            raise ValueError("register at least one handler with @worker.handler(name)")
        if window is None:
            window = float("inf") if self.register_timeout is None else self.register_timeout
        body = {"name": self.name, "namespaces": self.namespaces, "handlers": sorted(self.handlers)}
        try:
            reg = self._transport.call("POST", "/v1/workers", body, window=window, what="register", stop=self._stopping)
        except Unauthorized as e:
            raise _auth_error(e, "register") from None
        self.lease_ttl = reg.get("lease_ttl_ms", 30000) / 1000.0
        server_hb = reg.get("heartbeat_interval_ms", 5000) / 1000.0
        self.heartbeat_interval = min(server_hb, self._heartbeat_override) if self._heartbeat_override else server_hb
        self.max_wait = reg.get("max_wait_ms", 30000) / 1000.0
        self.worker_id = reg["worker_id"]  # only once registered: the old id stays until then
        self.log.info("weft worker %s registered: handlers %s, namespaces %s, lease %s, heartbeat every %s", self.worker_id,
                      ",".join(sorted(self.handlers)), ",".join(self.namespaces) or "(all)", format_duration(self.lease_ttl),
                      format_duration(self.heartbeat_interval))
        return reg

    def _worker_lost(self, old_id, err):
        """The server does not know old_id (declared dead, deregistered): its
        steps were reclaimed. Forget them and register again, once."""
        with self._reg_lock:
            if self.worker_id != old_id:
                return  # another thread registered again already
            with self._lock:
                held = [s for s in self._steps.values() if s.worker_id == old_id]
                for s in held:
                    self._lose(s, "reclaimed: the worker was declared dead")
            self.log.warning("weft worker %s is unknown to the server (%s): its %d steps were reclaimed; registering again",
                             old_id, err.message if isinstance(err, APIError) else err, len(held))
            if self._stopping.is_set():
                return
            self.register(window=self.lease_ttl)

    def _report_window(self):
        return self.lease_ttl

    # -- claiming ------------------------------------------------------------------

    def run_once(self, wait=None):
        """Claim up to the free slots (waiting up to `wait` seconds for work),
        start their handlers, and return how many were claimed."""
        with self._cond:
            while len(self._steps) >= self.concurrency and not self._stopping.is_set():
                self._cond.wait(0.5)
            if self._stopping.is_set():
                return 0
            free = min(self.concurrency - len(self._steps), 100)
        wid = self.worker_id
        wait = self.wait if wait is None else wait
        if self.max_wait is not None:
            wait = min(wait, self.max_wait)
        body = {"handlers": sorted(self.handlers), "namespaces": self.namespaces, "max": free, "wait_ms": int(max(wait, 0) * 1000)}
        try:
            resp = self._transport.call("POST", "/v1/workers/%s/claim" % wid, body, window=self.lease_ttl, what="claim",
                                        stop=self._stopping, timeout=self.timeout + wait, abortable=True)
        except WorkerLost as e:
            self._worker_lost(wid, e)
            return 0
        now = time.monotonic()
        steps = [Step(self, raw, wid, now) for raw in (resp or {}).get("steps") or []]
        for step in steps:
            self._start(step)
        return len(steps)

    def _start(self, step):
        self.log.info("step %d (%s/%s %s) attempt %d claimed%s", step.step_id, step.namespace, step.workflow, step.name,
                      step.attempt, " (timeout %s)" % format_duration(step.timeout) if step.timeout else "")
        with self._lock:
            self._steps[step.key] = step
        if step.timeout:
            t = threading.Timer(step.timeout, self._timed_out, (step,))
            t.daemon = True
            step._timer = t
            t.start()
        threading.Thread(target=self._execute, args=(step,), name="weft-step-%d" % step.step_id, daemon=True).start()

    # -- running -----------------------------------------------------------------

    def _execute(self, step):
        try:
            fn = self.handlers.get(step.handler)
            if fn is None:
                raise LookupError("this worker has no handler %r" % step.handler)
            if isinstance(fn, _FunctionHandler):
                outcome = fn.run(step)
            else:
                result = fn(step)
                json.dumps(result, allow_nan=False)  # not JSON: a failure of the attempt, reported as such
                outcome = ("/complete", {"result": result})
        except BaseException as e:  # noqa: BLE001 - a handler's failure is reported, never fatal to the worker
            if not step.preempted.is_set():
                outcome = self._failure(step, e)
            else:
                # Stopped as asked (whatever it raised): back to the queue.
                self.log.info("step %d (%s) attempt %d stopped: %s", step.step_id, step.name, step.attempt, step.preempt_reason)
                outcome = ("/fail", {"error": step.preempt_reason or "preempted", "preempted": True})
        with self._lock:
            if step._state != RUNNING:
                # Timed out or lost: the outcome reported (if any) is not this one.
                self.log.info("step %d attempt %d: the handler returned after the step was %s: its outcome is ignored",
                              step.step_id, step.attempt, step.cancel_reason or "settled")
                return
            step._state = REPORTING
            if step._timer is not None:
                step._timer.cancel()
        self._report(step, *outcome)

    def _failure(self, step, e):
        """The report of the exception a handler raised."""
        if isinstance(e, Permanent):
            return ("/fail", {"error": str(e) or "permanent failure", "permanent": True})
        if isinstance(e, RetryAfter):
            ms = int(max(0, min(float(e.seconds) * 1000, _WEEK_MS)))
            return ("/fail", {"error": str(e) or "retry requested", "retry_after_ms": ms})
        if isinstance(e, Snooze):
            # Not done yet, and no failure. At least 1 ms: a snooze_ms of 0
            # would be a plain failure.
            ms = int(max(1, min(float(e.seconds) * 1000, _WEEK_MS)))
            if not step.cancelled():
                self.log.info("step %d (%s) attempt %d snoozed for %s: %s", step.step_id, step.name, step.attempt,
                              format_duration(ms / 1000), e)
            return ("/fail", {"error": str(e) or "snoozed", "snooze_ms": ms})
        # A handler's failure is reported, never fatal to the worker.
        if not step.cancelled():
            self.log.warning("step %d (%s) attempt %d: handler raised %s: %s", step.step_id, step.name, step.attempt,
                             type(e).__name__, e, exc_info=not isinstance(e, StaleLease))
        return ("/fail", {"error": ("%s: %s" % (type(e).__name__, e)) if str(e) else type(e).__name__})

    def _timed_out(self, step):
        with self._lock:
            if step._state != RUNNING:
                return
            step._state = REPORTING
            step._cancelled_by("timed out")
        msg = "step timed out after %s" % format_duration(step.timeout)
        self.log.warning("step %d (%s) attempt %d: %s: reporting the failure; the handler's late result will be ignored",
                         step.step_id, step.name, step.attempt, msg)
        self._report(step, "/fail", {"error": msg})

    def _report(self, step, suffix, body):
        """Send a step's outcome, retrying, then settle the step. An
        outcome the server refuses with a 4xx (a result too large, not
        JSON) is reported as a failed attempt instead, so that the step
        ends rather than being reclaimed and run again."""
        kind = suffix.lstrip("/")
        what = "%s of step %d attempt %d" % (kind, step.step_id, step.attempt)
        try:
            if step.lost.is_set():
                return
            try:
                self._send_outcome(step, kind, dict(body, fence=step.fence), what)
            except APIError as e:
                if isinstance(e, (StaleLease, WorkerLost, Unauthorized)) or not 400 <= e.status < 500:
                    raise
                fallback = _refused_outcome(kind, body, e)
                self.log.error("%s refused (%s): reporting the attempt failed instead%s", what, e,
                               " (permanently)" if fallback.get("permanent") else "")
                what = "fail of step %d attempt %d (instead of the refused %s)" % (step.step_id, step.attempt, kind)
                self._send_outcome(step, "fail", dict(fallback, fence=step.fence), what)
        except StaleLease as e:
            self.log.warning("%s refused: the step is no longer held by this worker (cancelled, timed out or taken over): "
                             "dropped (%s)", what, e.message)
        except WorkerLost as e:
            self.log.warning("%s refused: the server declared this worker dead: the step was reclaimed", what)
            self._quietly(self._worker_lost, step.worker_id, e)
        except Interrupted:
            self.log.warning("%s not sent: the step is no longer this worker's (%s)", what, step.cancel_reason or "lost")
        except ServerUnavailable as e:
            self.log.error("%s: GAVE UP after %.0fs without reaching the server (%s). The step is no longer listed in "
                           "heartbeats: the server will reclaim it and run it again.", what, e.elapsed, e.last_error)
        except APIError as e:
            self.log.error("%s refused (%s): dropped; the server will reclaim the step", what, e)
        except Exception:  # noqa: BLE001
            self.log.exception("%s failed: dropped; the server will reclaim the step", what)
        finally:
            with self._lock:
                self._settle(step)

    def _send_outcome(self, step, kind, body, what):
        resp = self._transport.call("POST", "/v1/workers/%s/%s" % (step.worker_id, kind), body, window=self._report_window(),
                                    what=what, stop=step.lost) or {}
        if resp.get("error") and kind == "complete":
            # Recorded, but not as a success: say why (a result that
            # cannot be stored fails the step for good).
            self.log.error("step %d (%s) attempt %d: complete recorded as %s: %s", step.step_id, step.name, step.attempt,
                           resp.get("state", "?"), resp["error"])
        else:
            self.log.info("step %d (%s) attempt %d: %s recorded: %s", step.step_id, step.name, step.attempt, kind,
                          resp.get("state", "ok"))

    def _quietly(self, fn, *args):
        try:
            fn(*args)
        except Exception as e:  # noqa: BLE001 - the loops try again
            self.log.warning("registering again failed: %s", e)

    # -- step state (under self._lock) --------------------------------------------

    def _settle(self, step):
        if step._state == SETTLED:
            return
        step._state = SETTLED
        if step._timer is not None:
            step._timer.cancel()
        if self._steps.get(step.key) is step:
            del self._steps[step.key]
        self._cond.notify_all()

    def _lose(self, step, reason):
        """The step is no longer this worker's: stop caring about it."""
        if step._state == SETTLED:
            return
        step.lost.set()
        step._cancelled_by(reason)
        self.log.warning("step %d (%s) attempt %d is no longer this worker's (%s): its outcome will not be reported",
                         step.step_id, step.name, step.attempt, reason)
        if step._state == RUNNING:
            self._settle(step)
        # REPORTING: the report's retries stop on step.lost and settle it.

    # -- reports from handlers ---------------------------------------------------

    def _step_report(self, step, suffix, body, what):
        try:
            return self._transport.call("POST", "/v1/workers/%s%s" % (step.worker_id, suffix), body, window=self._report_window(),
                                        what="%s of step %d attempt %d" % (what, step.step_id, step.attempt), stop=step._cancel)
        except (StaleLease, WorkerLost) as e:
            with self._lock:
                self._lose(step, "%s refused: %s" % (what, e.code))
            if isinstance(e, StaleLease):
                raise
            raise StaleLease(e.status, "stale_lease", e.message) from None
        except Interrupted:
            raise StaleLease(409, "stale_lease", "step %d attempt %d is %s: %s not sent" % (
                step.step_id, step.attempt, step.cancel_reason or "cancelled", what)) from None

    def _step_progress(self, step, fraction, message):
        if self._progress_unsupported:
            return False
        try:
            self._step_report(step, "/progress", {"fence": step.fence, "fraction": fraction, "message": message}, "progress")
            return True
        except StaleLease:
            raise
        except APIError as e:
            if e.status in (404, 405) and e.message.startswith("no route"):
                self._progress_unsupported = True
                self.log.warning("the server has no progress endpoint (POST /v1/workers/{id}/progress): progress is not reported")
            else:
                self.log.warning("progress of step %d attempt %d refused: %s", step.step_id, step.attempt, e)
        except ServerUnavailable as e:
            self.log.warning("progress of step %d attempt %d dropped: %s", step.step_id, step.attempt, e)
        return False

    # -- heartbeats ----------------------------------------------------------------

    def held(self):
        """The fences of every step the worker holds (what a heartbeat lists)."""
        with self._lock:
            return [s.fence for s in self._steps.values() if s.worker_id == self.worker_id]

    def _held_fences(self, wid):
        with self._lock:
            return [s.fence for s in self._steps.values() if s.worker_id == wid]

    def _heartbeat_loop(self):
        while not self._hb_stop.wait(self.heartbeat_interval):
            wid = self.worker_id
            try:
                resp = self._beat(wid)
            except Interrupted:
                return
            except WorkerLost as e:
                self._quietly(self._worker_lost, wid, e)
                continue
            except Unauthorized as e:
                self._fatal = _auth_error(e, "heartbeat")
                self.log.error("%s: stopping", self._fatal)
                self.stop()
                continue
            except ServerUnavailable as e:
                self.log.error("no heartbeat reached the server for %.0fs (%s): it has presumably declared this worker dead "
                               "and reclaimed its %d steps", e.elapsed, e.last_error, len(self._held_fences(wid)))
                continue
            except APIError as e:
                self.log.error("heartbeat refused: %s", e)
                continue
            except Exception:  # noqa: BLE001 - keep beating
                self.log.exception("heartbeat failed")
                continue
            lost = {(f["step_id"], f["attempt"], str(f["lease_id"])) for f in (resp or {}).get("lost") or []}
            if lost:
                with self._lock:
                    for s in list(self._steps.values()):
                        if s.worker_id == wid and s.key in lost:
                            self._lose(s, "cancelled or taken over")
            self._preempt(wid, (resp or {}).get("preempt") or [])

    def _beat(self, wid):
        """Send one heartbeat; an older server that refuses the fields of
        preemption gets plain heartbeats from then on (never preempted)."""
        try:
            return self._transport.call("POST", "/v1/workers/%s/heartbeat" % wid, lambda: self._heartbeat_body(wid),
                                        window=self.lease_ttl, what="heartbeat", stop=self._hb_stop)
        except APIError as e:
            if self._load_unsupported or e.status != 400 or e.code != "unknown_field" or e.field not in ("free", "handlers", "namespaces"):
                raise
        self._load_unsupported = True
        self.log.warning("the server does not take free slots in heartbeats: this worker's steps are not preempted")
        return self._transport.call("POST", "/v1/workers/%s/heartbeat" % wid, lambda: self._heartbeat_body(wid),
                                    window=self.lease_ttl, what="heartbeat", stop=self._hb_stop)

    def _heartbeat_body(self, wid):
        """A heartbeat: every step held and, for preemption, how many more
        the worker could run now, with its claim's handlers and namespaces."""
        with self._lock:
            fences = [s.fence for s in self._steps.values() if s.worker_id == wid]
            free = max(0, self.concurrency - len(self._steps))
        body = {"steps": fences}
        # A stopping worker claims nothing more: no room to make.
        if not self._load_unsupported and not self._stopping.is_set():
            body.update(free=free, handlers=sorted(self.handlers))
            if self.namespaces:
                body["namespaces"] = self.namespaces
        return body

    def _preempt(self, wid, asked):
        """Tell the handlers of the steps the server asked to stop."""
        for p in asked:
            f = p.get("fence") or {}
            key = (f.get("step_id"), f.get("attempt"), str(f.get("lease_id")))
            with self._lock:
                s = self._steps.get(key)
                if s is None or s.worker_id != wid or s._state != RUNNING or s.preempted.is_set():
                    continue
                s._preempted_by(p.get("reason") or "preempted by a step of higher priority")
            self.log.info("step %d (%s) attempt %d: %s: asking its handler to stop", s.step_id, s.name, s.attempt, s.preempt_reason)

    # -- the loop --------------------------------------------------------------------

    def run(self, install_signals=True):
        """Register and work until stop() (or SIGINT/SIGTERM), then drain
        running handlers (up to drain_timeout) and deregister.

        Raises Unauthorized if the server refuses the worker's credentials,
        APIError if it refuses its registration or claims for another
        reason, ServerUnavailable if the first registration cannot reach it.
        """
        restore = None
        if install_signals and threading.current_thread() is threading.main_thread():
            restore = self._install_signals()
        try:
            try:
                self.register()
            except Interrupted:
                return
            hb = threading.Thread(target=self._heartbeat_loop, name="weft-heartbeat", daemon=True)
            hb.start()
            try:
                self._claim_loop()
            finally:
                self._drain()
                self._hb_stop.set()
                hb.join(self.timeout + 1)
                self._deregister()
            if self._fatal is not None:
                raise self._fatal
        finally:
            if restore:
                for sig, handler in restore.items():
                    signal.signal(sig, handler)

    def _claim_loop(self):
        while not self._stopping.is_set():
            try:
                self.run_once()
            except Interrupted:
                break
            except Unauthorized as e:
                self._fatal = _auth_error(e, "claim")
                self.log.error("%s: stopping", self._fatal)
                break
            except ServerUnavailable as e:
                self.log.error("cannot claim: %s; still trying", e)
                self._stopping.wait(1.0)
            except APIError as e:
                self._fatal = e
                self.log.error("the server refused the claim (%s): stopping", e)
                break
            except Exception:  # noqa: BLE001 - keep the worker up
                self.log.exception("claim failed")
                self._stopping.wait(1.0)

    def _drain(self):
        deadline = time.monotonic() + self.drain_timeout
        with self._cond:
            if self._steps:
                self.log.info("stopping: waiting up to %s for %d running steps", format_duration(self.drain_timeout), len(self._steps))
            while self._steps and not self._abort.is_set():
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            if self._steps:
                self.log.warning("stopping with %d steps unfinished: the server reclaims them when the worker deregisters",
                                 len(self._steps))
                for s in list(self._steps.values()):
                    self._lose(s, "the worker stopped before it finished")

    def _deregister(self):
        wid = self.worker_id
        if wid is None:
            return
        try:
            self._transport.call("DELETE", "/v1/workers/%s" % wid, window=min(self.lease_ttl, 10.0), what="deregister")
            self.log.info("weft worker %s deregistered", wid)
        except (WorkerLost, StaleLease):
            pass
        except Exception as e:  # noqa: BLE001
            self.log.warning("deregister %s failed (%s): the server reclaims its steps when its lease lapses", wid, e)

    def stop(self, drain=True):
        """Stop claiming; run() then waits for running handlers (unless
        drain is False), reports their outcomes, and deregisters. Safe to
        call from any thread and from signal handlers."""
        self._stopping.set()
        if not drain:
            self._abort.set()
        self._transport.abort()

    def _install_signals(self):
        def on_signal(signum, _frame):
            if self._stopping.is_set():
                self.log.warning("signal %d again: stopping without waiting for running handlers", signum)
                self.stop(drain=False)
            else:
                self.log.info("signal %d: stopping (again to stop without waiting for running handlers)", signum)
                self.stop()

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, on_signal)
        return previous


def _storable(text):
    """text with each NUL and each lone surrogate (what Python makes of
    bytes that are not UTF-8) replaced with U+FFFD."""
    return "".join("\ufffd" if c == "\x00" or "\ud800" <= c <= "\udfff" else c for c in text)


def _refused_outcome(kind, body, err):
    """The failure to report in place of an outcome the server refused with
    err (a 4xx): a refused result fails the step for good, naming the
    refusal; a refused failure is sent again with its error text alone (a
    refused preemption or snooze becomes a plain failure)."""
    if kind == "complete":
        return {"error": "the server refused the result: %s" % _storable(str(err))[:4096], "permanent": True}
    text = _storable(str(body.get("error") or "failed"))[:60000]
    out = {"error": "%s (the server refused the report: %s)" % (text, _storable(str(err))[:1024])}
    if body.get("permanent"):
        out["permanent"] = True
    return out


def _auth_error(e, during):
    if getattr(e, "explained", False):
        return e
    hint = ("the server did not accept the token: check the API key or JWT (WEFT_TOKEN)" if e.status == 401
            else "the token lacks the workers:connect permission")
    err = Unauthorized(e.status, e.code, "%s refused: %s (%s)" % (during, hint, e.message), e.field)
    err.explained = True
    return err
