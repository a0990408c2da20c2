"""Task operations on a weft server, beside the worker protocol.

    from weft_worker import Client

    c = Client("http://127.0.0.1:8080", token="weft_...")
    task = c.submit("deploy/release-gate", {"service": "api"})
    c.signal(task["id"], "go_live", {"approved_by": "ops-lead"})

Errors are APIError (with the server's status and stable code) for error
responses; connection failures raise OSError. Nothing is retried: a signal or
submission is sent once (give submissions an idempotency key to retry them
safely yourself).
"""

import urllib.parse

from .transport import Transport

__all__ = ["Client"]


class Client:
    """A client of the task API: submit, get and signal tasks.

    The token needs tasks:create to submit, tasks:read to get and
    tasks:signal to signal.
    """

    def __init__(self, url, token=None, timeout=30.0):
        self._t = Transport(url, token=token, timeout=timeout, user_agent="weft-client-python")

    def submit(self, workflow, input=None, key=None, priority=None, tags=None):
        """Create a task of workflow ("ns/name" or "ns/name@version");
        return it (an existing one when key matches an earlier submission).

        tags label the task ({"env": "staging"}): `weft tasks --tag
        env=staging` and the bulk actions select tasks by them. At most 20;
        keys of ASCII letters, digits, _ . - / (up to 63 bytes, starting
        with a letter or digit), values of 1 to 255 bytes without control
        characters: the server refuses others (APIError, field "tags")."""
        return self._t.request("POST", "/v1/tasks", _submission(workflow, input, key, priority, tags))

    def submit_many(self, tasks):
        """Create up to 1000 tasks in one request and one transaction: all
        of them or none. tasks is a list of dicts with the arguments of
        submit ({"workflow": "shop/checkout", "input": {...}, "key": ...,
        "priority": ..., "tags": {...}}). Return the tasks in that order,
        each with "duplicate": True where its key matched an earlier
        submission. A refused task raises APIError naming it by index
        (field "tasks[2].priority"), and none of the tasks is created."""
        if not isinstance(tasks, (list, tuple)) or not tasks:
            raise ValueError("tasks: want a non-empty list")
        body = {"tasks": []}
        for i, t in enumerate(tasks):
            unknown = set(t) - {"workflow", "input", "key", "priority", "tags"}
            if unknown:
                raise ValueError("tasks[%d]: unknown keys %s" % (i, ", ".join(sorted(unknown))))
            body["tasks"].append(_submission(t.get("workflow"), t.get("input"), t.get("key"), t.get("priority"), t.get("tags")))
        return self._t.request("POST", "/v1/tasks/batch", body)["tasks"]

    def task(self, task_id):
        """Return the task with its steps."""
        return self._t.request("GET", "/v1/tasks/%d" % _task_id(task_id))

    def signal(self, task_id, name, payload=None):
        """Send the signal name, with a JSON-encodable payload (None is
        null), to a task. Return True when a waiting step took it at once,
        False when it is kept for the next step that begins to wait for it.
        A task that has ended answers APIError with status 409."""
        if not isinstance(name, str) or not name:
            raise ValueError("signal name: want a non-empty string")
        body = None if payload is None else {"payload": payload}
        path = "/v1/tasks/%d/signals/%s" % (_task_id(task_id), urllib.parse.quote(name, safe=""))
        return bool(self._t.request("POST", path, body)["delivered"])


def _submission(workflow, input, key, priority, tags):
    body = {"workflow": workflow}
    if input is not None:
        body["input"] = input
    if key is not None:
        body["idempotency_key"] = key
    if priority is not None:
        body["priority"] = priority
    if tags:
        if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            raise TypeError("tags must be a dict of str to str")
        body["tags"] = tags
    return body


def _task_id(task_id):
    if isinstance(task_id, bool) or not isinstance(task_id, int) or task_id <= 0:
        raise ValueError("task id %r: want a positive integer" % (task_id,))
    return task_id
