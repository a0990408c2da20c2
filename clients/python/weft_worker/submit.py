"""Submitting tasks from Python, e.g. a handler that starts follow-up work.

    from weft_worker import submit

    task = submit("http://127.0.0.1:8080", "shop/checkout", {"order": 42},
                  token="weft_...", tags={"env": "staging"}, key="order-42")
    print(task["id"], task["state"], task.get("tags"))
"""

from .transport import Transport


def submit(url, workflow, input=None, *, token=None, tags=None, key=None, priority=None, timeout=30.0):
    """Submit one task of workflow ("namespace/name" or "namespace/name@version")
    and return the task (a dict) the server created or, for an idempotency
    key that exists, found.

    tags label the task ({"env": "staging"}): `weft tasks --tag env=staging`
    and the bulk actions select tasks by them. At most 20; keys of ASCII
    letters, digits, _ . - / (up to 63 bytes, starting with a letter or
    digit), values of 1 to 255 bytes without control characters: the server
    refuses others with an APIError whose field is "tags".
    """
    body = {"workflow": workflow}
    if input is not None:
        body["input"] = input
    if tags:
        if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
            raise TypeError("tags must be a dict of str to str")
        body["tags"] = tags
    if key:
        body["idempotency_key"] = key
    if priority is not None:
        body["priority"] = priority
    return Transport(url, token=token, timeout=timeout).request("POST", "/v1/tasks", body)
