"""The exceptions of weft_worker.

Handlers raise Permanent or RetryAfter to say how their attempt failed, and
Snooze to say the step is not done yet (no failure). The client raises
APIError (and its subclasses) for error responses of the server and
ServerUnavailable when it gave up retrying a request.
"""

__all__ = ["APIError", "StaleLease", "WorkerLost", "Unauthorized", "ServerUnavailable", "Permanent", "RetryAfter", "Snooze", "Preempted"]


class APIError(Exception):
    """An error response of the weft API: its HTTP status and stable code.

    retry_after is the server's Retry-After in seconds, or None.
    """

    def __init__(self, status, code, message, field=None, retry_after=None):
        super().__init__("%s %s: %s" % (status, code, message))
        self.status, self.code, self.message, self.field = status, code, message, field
        self.retry_after = retry_after


class StaleLease(APIError):
    """The step is no longer held by this attempt: it was cancelled, timed
    out, or taken over by another worker. Its outcome belongs to someone else."""


class WorkerLost(APIError):
    """The server does not know the worker (any more): it was declared dead
    or deregistered. The worker registers again; its steps were reclaimed."""


class Unauthorized(APIError):
    """The server refused the worker's credentials (401) or they lack the
    workers:connect permission (403). Retrying cannot help."""


class ServerUnavailable(Exception):
    """A request kept failing (connection errors, timeouts, 5xx) for the
    whole retry window. The last error is its __cause__ and .last_error."""

    def __init__(self, what, elapsed, attempts, last_error):
        super().__init__("%s: the server did not answer for %.1fs (%d attempts); last error: %s" % (what, elapsed, attempts, last_error))
        self.what, self.elapsed, self.attempts, self.last_error = what, elapsed, attempts, last_error


class Permanent(Exception):
    """Raise from a handler to fail the step at once, without retrying."""


class RetryAfter(Exception):
    """Raise from a handler to fail the attempt and retry after `seconds`
    (instead of the retry policy's backoff; its max attempts still apply)."""

    def __init__(self, seconds, message="retry requested"):
        super().__init__(message)
        self.seconds = seconds


class Snooze(Exception):
    """Raise from a handler to say the step is not done yet, and that is no
    failure: it runs again after `seconds` (up to a week) with the same
    attempt number (the attempt is given back; the retry policy is not
    used). The message says why."""

    def __init__(self, seconds, message="snoozed"):
        super().__init__(message)
        self.seconds = seconds


class Preempted(Exception):
    """Raised by Step.raise_if_preempted() once the server asked the worker
    to stop the step for more urgent work. Any exception a handler raises
    after the preemption reports the step preempted: it goes back to the
    queue keeping its checkpoint, without using an attempt."""
