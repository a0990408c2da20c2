"""A weft remote worker in pure Python (standard library only).

    from weft_worker import Worker, Permanent

    worker = Worker("http://127.0.0.1:8080", token="weft_...", name="py", namespaces=["shop"])

    @worker.handler("shop.enrich")
    def enrich(step):
        step.progress(0.5, "priced")
        return {"total": step.deps["price"]["amount"] * 2}

    worker.run()   # until stop() or SIGINT/SIGTERM

A handler gets a Step (input, deps, config, attempt, claimed_checkpoint, ...)
and returns a JSON-encodable result. Raising an exception fails the attempt
and the step's retry policy decides what follows; raise Permanent to fail
without retrying, or RetryAfter(seconds) to choose the delay. Raising
Snooze(seconds, why) is no failure: the step is not done yet and runs again
after that long with the same attempt number.
step.checkpoint(value) saves progress that a later attempt starts from,
step.progress(fraction, message) shows how far it got, and step.cancelled()
says when to give up (timeout passed, step taken over, worker stopping).
A preemptible step may be asked to stop for more urgent work: step.preempted
is set (step.wait() wakes); the handler saves a checkpoint and raises
(step.raise_if_preempted() raises Preempted), and the step goes back to the
queue without using an attempt.

A durable function is a workflow written as plain Python, whose calls are
steps of its task (function.py):

    @worker.function("shop.checkout")
    def checkout(fn, order):
        charge = fn.step("charge", lambda: charge_card(order))
        fn.sleep(3600)
        return {"charge": charge}

Client submits, reads and signals tasks (client.py).

The protocol is described in docs/remote-workers.md.
"""

from .client import Client
from .errors import APIError, Permanent, Preempted, RetryAfter, ServerUnavailable, Snooze, StaleLease, Unauthorized, WorkerLost
from .function import CallError, Function, Future, NonDeterminism
from .step import Step
from .worker import Worker, format_duration

__version__ = "0.2.0"

__all__ = ["Worker", "Step", "Client", "Function", "Future", "CallError", "NonDeterminism", "Permanent", "Preempted", "RetryAfter", "Snooze", "APIError", "StaleLease", "WorkerLost", "Unauthorized",
           "ServerUnavailable", "format_duration", "__version__"]
