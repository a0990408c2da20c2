"""Step: what a handler sees of the step it runs, and what it may report."""

import json
import math
import threading
import time

from .errors import Preempted, StaleLease

__all__ = ["Step"]

# The states of a step on the worker. running: its handler runs; reporting:
# its outcome (or its timeout) is being reported; settled: nothing more to
# do, the step is no longer listed in heartbeats.
RUNNING, REPORTING, SETTLED = "running", "reporting", "settled"


class Step:
    """One claimed attempt of a step.

    Attributes: step_id, task_id, namespace, workflow, version, name (the
    step's name), handler, attempt (1 for the first), input (the task's
    input), deps (results of the dependencies, by step name), config (the
    step's static config), claimed_checkpoint (the checkpoint the step was
    claimed with, None if none), saved_checkpoint (the latest checkpoint:
    the claimed one, then what checkpoint() saved), timeout (seconds, None
    if the step has none), deadline (a time.monotonic() value, None if no
    timeout), fence (the fencing token sent back with every report),
    worker_id (the registration the step was claimed under), lost (a
    threading.Event set when the server says the step is no longer this
    worker's: cancelled, timed out or taken over), preempted (a
    threading.Event set when the server asks the worker to stop this
    preemptible step for a step of higher priority; preempt_reason then
    says which: 'preempted by task N step "X" (priority P)'), traceparent (the W3C
    traceparent of the task's trace: the submitter's, or one the task
    started when it was submitted outside any trace; None for
    tasks submitted before weft stored traces. Pass it to
    your tracer, e.g. OpenTelemetry's TraceContextTextMapPropagator().extract(
    {"traceparent": step.traceparent, "tracestate": step.tracestate or ""}),
    so that your spans join the task's trace), tracestate (its W3C
    tracestate, None when the submitter had none) and raw (the claim as
    received).
    """

    def __init__(self, worker, raw, worker_id, claimed_at=None):
        self._worker = worker
        self.raw = raw
        self.step_id = raw["step_id"]
        self.task_id = raw.get("task_id")
        self.namespace = raw.get("namespace")
        self.workflow = raw.get("workflow")
        self.version = raw.get("version")
        self.name = raw.get("step")
        self.handler = raw.get("handler")
        self.attempt = raw.get("attempt")
        self.input = raw.get("input")
        self.deps = raw.get("deps") or {}
        self.config = raw.get("config")
        self.claimed_checkpoint = raw.get("checkpoint")
        self.saved_checkpoint = self.claimed_checkpoint
        self.fence = raw["fence"]
        self.kind = raw.get("kind")  # "function" or "call" for a durable function's steps
        self.calls = raw.get("calls") or []  # the calls its task recorded, for those
        self.traceparent = raw.get("traceparent") or None
        self.tracestate = raw.get("tracestate") or None
        self.worker_id = worker_id
        timeout_ms = raw.get("timeout_ms") or 0
        self.timeout = timeout_ms / 1000.0 if timeout_ms > 0 else None
        self.claimed_at = time.monotonic() if claimed_at is None else claimed_at
        self.deadline = self.claimed_at + self.timeout if self.timeout else None
        self.lost = threading.Event()
        self._cancel = threading.Event()
        self.cancel_reason = None
        self.preempted = threading.Event()
        self.preempt_reason = None
        self._stop = threading.Event()  # cancelled or preempted: wait() wakes
        self._state = RUNNING  # guarded by the worker's lock
        self._timer = None

    def __repr__(self):
        return "<Step %s/%s %s id=%s attempt=%s>" % (self.namespace, self.workflow, self.name, self.step_id, self.attempt)

    @property
    def key(self):
        """(step_id, attempt, lease_id): identifies this attempt's claim."""
        return (self.fence["step_id"], self.fence["attempt"], str(self.fence["lease_id"]))

    # -- cancellation ----------------------------------------------------------

    def cancelled(self):
        """True once the handler should stop: its timeout passed, the server
        said the step is no longer this worker's, or the worker is stopping
        and its drain time is over. A cancelled handler's outcome is ignored."""
        return self._cancel.is_set()

    def time_left(self):
        """Seconds until the step's timeout (never negative), None if it has none."""
        if self.deadline is None:
            return None
        return max(0.0, self.deadline - time.monotonic())

    def wait(self, seconds):
        """Sleep up to `seconds`, waking early if the step is cancelled or
        preempted. Returns True if it was: `if step.wait(1): return`
        (check step.preempted, or call raise_if_preempted(), to tell)."""
        return self._stop.wait(seconds)

    def raise_if_preempted(self):
        """Raise Preempted if the server asked to stop the step for more
        urgent work. The handler may save a checkpoint first: the next
        attempt (under the same attempt number) starts from it."""
        if self.preempted.is_set():
            raise Preempted(self.preempt_reason or "preempted")

    def _cancelled_by(self, reason):
        if self.cancel_reason is None:
            self.cancel_reason = reason
        self._cancel.set()
        self._stop.set()

    def _preempted_by(self, reason):
        if self.preempt_reason is None:
            self.preempt_reason = reason
        self.preempted.set()
        self._stop.set()

    # -- reports from the handler ------------------------------------------------

    def _check_held(self, what):
        if self._cancel.is_set():
            raise StaleLease(409, "stale_lease", "step %d attempt %d is %s on this worker: %s not sent" % (
                self.step_id, self.attempt, self.cancel_reason or "cancelled", what))

    def checkpoint(self, value):
        """Save progress that a later attempt of this step starts from (as
        its claimed_checkpoint). Fenced: refused (StaleLease) once this
        attempt no longer holds the step. Retried while the server is
        unreachable, up to the worker's lease period."""
        json.dumps(value, allow_nan=False)  # fail here, in the handler, if it is not JSON
        self._check_held("checkpoint")
        self._worker._step_report(self, "/checkpoint", {"fence": self.fence, "checkpoint": value}, "checkpoint")
        self.saved_checkpoint = value

    def progress(self, fraction, message=""):
        """Report how far the handler got: fraction from 0 to 1, and an
        optional message. Shown as the step's progress by the API and the
        dashboard. Returns True if the server recorded it.

        Progress is advisory: if it cannot be delivered it is logged and
        dropped (False), except that StaleLease is raised once the step is
        no longer this attempt's, so that the handler can stop.
        """
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or math.isnan(fraction) or not 0 <= fraction <= 1:
            raise ValueError("progress fraction must be a number from 0 to 1, got %r" % (fraction,))
        if not isinstance(message, str):
            raise TypeError("progress message must be a string, got %s" % type(message).__name__)
        self._check_held("progress")
        return self._worker._step_progress(self, float(fraction), message)
