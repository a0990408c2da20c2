"""HTTP/JSON transport to a weft server, with retries.

Transport.request sends one request. Transport.call retries it, with
exponential backoff and jitter, on what may pass (connection errors,
timeouts, 5xx, 429, honouring Retry-After) until a window of time is over;
any other error response is final at once. Only the standard library is used.
"""

import email.utils
import http.client
import json
import logging
import random
import socket
import ssl
import threading
import time
import urllib.parse

from .errors import APIError, ServerUnavailable, StaleLease, Unauthorized, WorkerLost

__all__ = ["Transport", "Interrupted", "retryable"]

_log = logging.getLogger("weft_worker")


class Interrupted(Exception):
    """A retrying call stopped because its stop event was set."""


def retryable(err):
    """Whether a request that failed with err may succeed if sent again."""
    if isinstance(err, APIError):
        return err.status >= 500 or err.status == 429
    # Connection refused or reset, timeouts, DNS, TLS, a response cut short.
    return isinstance(err, (OSError, http.client.HTTPException))


def _retry_after(value):
    """Seconds from a Retry-After header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def api_error(status, payload, headers=None):
    """The APIError (or subclass) for an error response."""
    err = {}
    try:
        body = json.loads(payload) if payload else {}
        if isinstance(body, dict) and isinstance(body.get("error"), dict):
            err = body["error"]
    except ValueError:
        pass
    code = err.get("code") or "http_%d" % status
    message = err.get("message") or (payload[:200].decode("utf-8", "replace") if payload else http.client.responses.get(status, ""))
    if code == "stale_lease":
        cls = StaleLease
    elif code == "worker_lost":
        cls = WorkerLost
    elif status in (401, 403):
        cls = Unauthorized
    else:
        cls = APIError
    ra = _retry_after(headers.get("Retry-After")) if headers is not None else None
    return cls(status, code, message, err.get("field"), retry_after=ra)


class Transport:
    """Sends JSON requests to one weft server.

    timeout bounds each attempt (connect and read); backoff_initial and
    backoff_max shape the delays between attempts of call().
    """

    backoff_initial = 0.2
    backoff_max = 5.0

    def __init__(self, url, token=None, timeout=30.0, user_agent="weft-worker-python"):
        parts = urllib.parse.urlsplit(url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("server URL %r: want http(s)://host[:port]" % url)
        self.url = url.rstrip("/")
        self._https = parts.scheme == "https"
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._ssl = ssl.create_default_context() if self._https else None
        self.token = token
        self.timeout = timeout
        self.user_agent = user_agent
        # Reentrant: abort() runs from signal handlers, which may interrupt
        # the main thread while it holds the lock.
        self._lock = threading.RLock()
        self._abortable = set()

    def _connection(self, timeout):
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=self._ssl)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def request(self, method, path, body=None, timeout=None, abortable=False, stop=None):
        """Send one request; return the decoded JSON body (None if empty).

        Raises APIError (or a subclass) for an error response, OSError or
        http.client.HTTPException when no response came. An abortable
        request is cut short by abort(), and not sent if the event `stop`
        is set once it is connected (Interrupted).
        """
        data = None if body is None else json.dumps(body, allow_nan=False, separators=(",", ":")).encode()
        headers = {"Accept": "application/json", "User-Agent": self.user_agent}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn = self._connection(timeout or self.timeout)
        if abortable:
            with self._lock:
                self._abortable.add(conn)
        try:
            if abortable:
                conn.connect()
                if stop is not None and stop.is_set():
                    raise Interrupted("%s %s" % (method, path))
            conn.request(method, self._prefix + path, body=data, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
            status, resp_headers = resp.status, resp.headers
        finally:
            if abortable:
                with self._lock:
                    self._abortable.discard(conn)
            conn.close()
        if 200 <= status < 300:
            if not payload:
                return None
            try:
                return json.loads(payload)
            except ValueError as e:
                raise http.client.HTTPException("%s %s: the %d response is not JSON: %s" % (method, path, status, e)) from None
        raise api_error(status, payload, resp_headers)

    def abort(self):
        """Cut short the abortable requests in flight (a waiting claim)."""
        with self._lock:
            conns = list(self._abortable)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def backoff(self, failures):
        """The delay before the next attempt after `failures` failures:
        exponential, capped, with "equal jitter" (between half and all of it)."""
        d = min(self.backoff_max, self.backoff_initial * (2 ** min(failures - 1, 30)))
        return d / 2 + random.random() * d / 2

    def call(self, method, path, body=None, *, window, what=None, stop=None, timeout=None, abortable=False, quiet=False):
        """Send a request, retrying what may pass for `window` seconds.

        body may be a callable, called before each attempt (a heartbeat
        lists the steps held at the time of the attempt). A Retry-After of
        the server is honoured. After the window one last attempt is made,
        then ServerUnavailable is raised. Setting the event `stop` ends the
        retries with Interrupted. Error responses other than 5xx/429 raise
        their APIError at once.
        """
        what = what or "%s %s" % (method, path)
        start = time.monotonic()
        give_up = start + window
        failures = 0
        while True:
            if stop is not None and stop.is_set():
                raise Interrupted(what)
            try:
                return self.request(method, path, body() if callable(body) else body, timeout=timeout, abortable=abortable, stop=stop)
            except Exception as e:  # noqa: BLE001 - sorted below
                if not retryable(e):
                    raise
                err = e
            failures += 1
            now = time.monotonic()
            if stop is not None and stop.is_set():
                raise Interrupted(what)
            if now >= give_up:
                raise ServerUnavailable(what, now - start, failures, _describe(err)) from err
            delay = err.retry_after if isinstance(err, APIError) and err.retry_after is not None else self.backoff(failures)
            delay = min(delay, give_up - now)
            (_log.debug if quiet else _log.warning)("%s failed (%s): retrying in %.1fs (giving up in %.1fs)", what, _describe(err), delay, give_up - now)
            if stop is not None:
                if stop.wait(delay):
                    raise Interrupted(what)
            else:
                time.sleep(delay)


def _describe(err):
    if isinstance(err, APIError):
        return str(err)
    return "%s: %s" % (type(err).__name__, err) if str(err) else type(err).__name__
