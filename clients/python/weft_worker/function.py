"""Durable functions: a workflow written as plain Python whose calls are
steps of its task, recorded by the server.

    @worker.function("shop.checkout")
    def checkout(fn, order):
        charge = fn.step("charge", lambda: charge_card(order), max_attempts=5)
        fn.sleep(3600)
        approval = fn.wait_signal("approval", timeout=86400)
        label = fn.child("shop/label", {"order": order["id"]})
        return {"charge": charge, "label": label}

The task's function step runs the function from the top each time: every
call that has ended returns its recorded result without running again, and
the first new calls become steps of the task, which the function step waits
for (holding no slot and no thread). A step call's code runs where its step
is claimed, by running the function up to the call. The function must make
the same calls in the same order each time; anything that varies belongs
inside a step. See docs/functions.md.
"""

import re

from .errors import Permanent

__all__ = ["Function", "Future", "CallError", "NonDeterminism"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}\Z")


class CallError(Exception):
    """A call whose step failed for good (or a signal wait that timed out).
    A function that lets it propagate fails its task at once."""

    def __init__(self, name, message):
        super().__init__('call "%s" failed: %s' % (name, message))
        self.name = name
        self.message = message


class NonDeterminism(Exception):
    """The function made a call other than the one its task recorded there."""


class _Stop(BaseException):
    """Ends a run of the function: not an Exception, so that the function's
    own `except Exception` cannot swallow it."""

    def __init__(self, error=None):
        super().__init__(str(error) if error else "stop")
        self.error = error


class Future:
    """A call made with Function.go; get() returns its result."""

    def __init__(self, handle):
        self._handle = handle

    @property
    def name(self):
        return self._handle.name

    def get(self):
        return self._handle.wait()


class _Handle:
    def __init__(self, fn, name, record):
        self.fn = fn
        self.name = name
        self.record = record

    def wait(self):
        rec = self.record
        if rec is not None and rec.get("ended"):
            if rec.get("ok"):
                return rec.get("result")
            raise CallError(self.name, rec.get("error") or "failed")
        if self.fn._target is not None:
            raise _Stop(Permanent('the function waited for call "%s" before it made call "%s"' % (self.name, self.fn._target)))
        raise _Stop()


class Function:
    """What a durable function gets: its calls (step, go, sleep, wait_signal,
    child), and task_id and input."""

    def __init__(self, step, target=None):
        self.step_info = step
        self.task_id = step.task_id
        self.input = step.input
        self._journal = step.calls or []
        self._next = 0
        self._used = {}
        self.issued = []
        self._target = target
        self.reached = False
        self.value = None
        self.error = None

    # -- calls ------------------------------------------------------------------

    def step(self, name, fn, max_attempts=None, timeout=None, priority=None):
        """Run fn() as a step named name and return its result (recorded once
        it succeeded). timeout (seconds) bounds each attempt."""
        return self.go(name, fn, max_attempts=max_attempts, timeout=timeout, priority=priority).get()

    def go(self, name, fn, max_attempts=None, timeout=None, priority=None):
        """step() without waiting: calls made with go run in parallel;
        Future.get() joins one."""
        call = {"max_attempts": max_attempts, "priority": priority,
                "timeout_ms": int(timeout * 1000) if timeout else None}
        return Future(self._call(name, "step", fn, call))

    def sleep(self, seconds):
        """Wait durably for seconds, holding no slot."""
        if seconds <= 0:
            raise ValueError("a sleep lasts more than 0 seconds, got %r" % (seconds,))
        self._call("sleep", "sleep", None, {"sleep_ms": max(1, int(seconds * 1000))}).wait()

    def wait_signal(self, name, timeout=None):
        """Wait durably for the signal name and return its payload; timeout
        (seconds) bounds the wait: past it, CallError."""
        result = self._call(name, "signal", None, {"signal": name, "timeout_ms": int(timeout * 1000) if timeout else None}).wait()
        return result.get("payload") if isinstance(result, dict) else result

    def child(self, workflow, input=None):
        """Start a child task of workflow ("namespace/name[@version]") and
        return its result."""
        name = workflow.rsplit("/", 1)[-1].split("@", 1)[0]
        return self._call(name, "child", None, {"workflow": workflow, "input": {} if input is None else input}).wait()

    # -- replay -----------------------------------------------------------------

    def _call(self, name, kind, run, fields):
        if not isinstance(name, str) or not _NAME.match(name):
            raise _Stop(Permanent("call name %r: use letters, digits, '_', '.' and '-', starting with a letter or digit, at most 128 bytes" % (name,)))
        n = self._used.get(name, 0)
        self._used[name] = n + 1
        if n:
            name = "%s[%d]" % (name, n + 1)
        pos = self._next
        self._next += 1
        if pos >= len(self._journal):
            call = {"name": name, "kind": kind}
            call.update({k: v for k, v in fields.items() if v is not None})
            self.issued.append(call)
            return _Handle(self, name, None)
        rec = self._journal[pos]
        if rec.get("name") != name or rec.get("kind") != kind:
            raise _Stop(Permanent(NonDeterminism(
                'non-determinism: call %d is %s "%s", but the task recorded %s "%s" there (change the function under a new version)'
                % (pos + 1, kind, name, rec.get("kind"), rec.get("name")))))
        if self._target is not None and name == self._target:
            self.reached = True
            try:
                self.value = run()
            except Exception as e:  # noqa: BLE001 - the step's failure, reported as such
                self.error = e
            raise _Stop()
        return _Handle(self, name, rec)


def drive(fn, step):
    """Run a function step: returns ("calls", [...]) for new calls to record,
    or ("result", value); raises what fails the attempt."""
    f = Function(step)
    returned, value = False, None
    try:
        value = fn(f, step.input)
        returned = True
    except _Stop as s:
        if s.error is not None:
            raise s.error
    except CallError as e:
        raise Permanent(str(e))
    if f.issued:
        return "calls", f.issued
    if not returned:
        from .errors import Snooze
        raise Snooze(1, "the function waits for a call that has not ended")
    if f._next < len(f._journal):
        rec = f._journal[f._next]
        raise Permanent('non-determinism: the function returned after %d calls, but the task recorded %d (the next is %s "%s")'
                        % (f._next, len(f._journal), rec.get("kind"), rec.get("name")))
    return "result", value


def run_call(fn, step):
    """Run a step call's code: the function up to the call. Returns its
    result or raises its error."""
    f = Function(step, target=step.name)
    try:
        fn(f, step.input)
    except _Stop as s:
        if s.error is not None:
            raise s.error
    except Exception as e:  # noqa: BLE001
        raise Permanent('the function, replayed to run call "%s", failed before it: %s' % (step.name, e))
    if not f.reached:
        raise Permanent('the function, replayed, did not make call "%s" (change the function under a new version)' % step.name)
    if f.error is not None:
        raise f.error
    return f.value
