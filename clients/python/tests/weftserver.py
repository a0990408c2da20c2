"""A real weft server for the tests: built from this checkout, run on a
throwaway SQLite database on a loopback port, killed and restarted at will.
The tests reach it through the API contract proxy
(internal/apicontract/proxy), which checks every answer against the
server's OpenAPI document: a server closed with answers outside it fails
the test.

WEFT_BIN names a built weft binary to use instead of `go build`.
"""

import atexit
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))

_build_lock = threading.Lock()
_built = {}
_build_dir = None


def _go_build(pkg, name):
    """Path of the binary of pkg, built once per test run."""
    global _build_dir
    with _build_lock:
        if name in _built:
            return _built[name]
        go = shutil.which("go")
        if go is None:
            if os.environ.get("CI"):
                raise RuntimeError("go is required in CI to build the weft server for the Python tests")
            raise unittest.SkipTest("go is not installed: cannot build the weft server")
        if _build_dir is None:
            _build_dir = tempfile.mkdtemp(prefix="weft-pytest-bin-")
            atexit.register(shutil.rmtree, _build_dir, True)
        path = os.path.join(_build_dir, name)
        res = subprocess.run([go, "build", "-o", path, pkg], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if res.returncode != 0:
            raise RuntimeError("go build %s failed:\n%s" % (pkg, res.stdout.decode(errors="replace")))
        _built[name] = path
        return path


def weft_binary():
    """Path of the weft binary: $WEFT_BIN, else built from the checkout."""
    return os.environ.get("WEFT_BIN") or _go_build("./cmd/weft", "weft")


def proxy_binary():
    """Path of the API contract proxy, built from the checkout."""
    return _go_build("./internal/apicontract/proxy", "apicontract-proxy")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout=10.0, interval=0.05, what="condition"):
    """Poll predicate until it returns a truthy value; return it, or fail after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


class HTTPError(Exception):
    def __init__(self, status, body):
        super().__init__("%d: %s" % (status, body))
        self.status, self.body = status, body


class WeftServer:
    """`weft serve` on a temporary database; admin_token has every permission."""

    def __init__(self):
        self.bin = weft_binary()
        self.dir = tempfile.mkdtemp(prefix="weft-pytest-")
        self.db = os.path.join(self.dir, "weft.db")
        self.port = free_port()
        self.proc = None
        self.log_path = os.path.join(self.dir, "serve.log")
        self.admin_token = self.create_key("admin", "admin:*")
        # The tests talk to the contract proxy, which forwards to the port.
        self.report = os.path.join(self.dir, "contract-breaches")
        proxy_port = free_port()
        self.url = "http://127.0.0.1:%d" % proxy_port
        self.proxy = subprocess.Popen([proxy_binary(), "--listen", "127.0.0.1:%d" % proxy_port,
                                       "--upstream", "http://127.0.0.1:%d" % self.port, "--report", self.report],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)

    def weft(self, *args):
        res = subprocess.run([self.bin, "--db", self.db] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
        if res.returncode != 0:
            raise RuntimeError("weft %s: %s" % (" ".join(args), res.stderr.decode(errors="replace")))
        return res.stdout.decode()

    def create_key(self, name, permissions):
        """Create an API key with `weft keys create`; return its secret."""
        return self.weft("keys", "create", "--name", name, "--permissions", permissions).strip().splitlines()[-1]

    def start(self, timeout=20.0):
        """Start (or restart) `weft serve` on the same database and port."""
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([self.bin, "--db", self.db, "serve", "--addr", "127.0.0.1:%d" % self.port, "--drain", "2s",
                                      "--heartbeat-interval", "1s"],
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

        def ready():
            if self.proc.poll() is not None:
                raise RuntimeError("weft serve exited with %s:\n%s" % (self.proc.returncode, self.log()))
            if self.proxy.poll() is not None:
                raise RuntimeError("the API contract proxy exited with %s" % self.proxy.returncode)
            try:
                with urllib.request.urlopen(self.url + "/health/ready", timeout=1) as r:
                    return r.status == 200
            except (OSError, urllib.error.HTTPError):
                return False

        wait_for(ready, timeout, what="weft serve to be ready")
        return self

    def kill(self):
        """SIGKILL the server, as a crash would."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    def close(self):
        """Stop the server and the proxy; fail if the server answered
        outside its OpenAPI document."""
        self.stop()
        self.proxy.terminate()
        self.proxy.wait(10)
        breaches = self.breaches()
        shutil.rmtree(self.dir, ignore_errors=True)
        if breaches:
            raise AssertionError("answers outside server/openapi.json:\n" + breaches)

    def breaches(self):
        try:
            with open(self.report, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- REST ------------------------------------------------------------------

    def api(self, method, path, body=None, token=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + (token or self.admin_token))
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                payload = r.read()
                return json.loads(payload) if payload else None
        except urllib.error.HTTPError as e:
            raise HTTPError(e.code, e.read().decode(errors="replace")) from None

    def register_workflow(self, template):
        return self.api("POST", "/v1/workflows", {"template": template})

    def submit(self, workflow, input=None, headers=None):
        return self.api("POST", "/v1/tasks", {"workflow": workflow, "input": input if input is not None else {}},
                        headers=headers)["id"]

    def task(self, task_id):
        return self.api("GET", "/v1/tasks/%d" % task_id)

    def audit(self, task_id):
        body = self.api("GET", "/v1/tasks/%d/audit" % task_id)
        return body["audit"]

    def wait_task(self, task_id, timeout=20.0):
        """Poll until the task ends; return it."""
        done = ("completed", "failed", "cancelled", "expired")
        return wait_for(lambda: (lambda t: t if t["state"] in done else None)(self.task(task_id)), timeout,
                        what="task %d to end" % task_id)


def step_named(task, name):
    for s in task.get("steps") or []:
        if s["name"] == name:
            return s
    raise AssertionError("task %s has no step %r: %s" % (task["id"], name, task))


class LogCapture(logging.Handler):
    """Collects the records of the weft_worker logger."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self._lock2 = threading.Lock()

    def emit(self, record):
        with self._lock2:
            self.records.append(record)

    def messages(self):
        with self._lock2:
            return [r.getMessage() for r in self.records]

    def find(self, *words):
        """The first message holding all words, or None."""
        for m in self.messages():
            if all(w in m for w in words):
                return m
        return None
