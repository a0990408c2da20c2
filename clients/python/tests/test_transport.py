"""Retries of the transport against a scripted HTTP server, and the checks
the client makes before sending anything. No weft server needed."""

import http.server
import json
import threading
import time
import unittest

from weft_worker import APIError, ServerUnavailable, StaleLease, Step, Unauthorized, WorkerLost, format_duration
from weft_worker.transport import Interrupted, Transport

from .weftserver import free_port


class Scripted(http.server.ThreadingHTTPServer):
    """Answers each request with the next (status, headers, body) of a script;
    the last entry repeats."""

    daemon_threads = True

    def __init__(self, script):
        self.script, self.seen = list(script), []
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.server_address[1]

    def close(self):
        self.shutdown()
        self.server_close()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        srv = self.server
        srv.seen.append((time.monotonic(), self.path, body, self.headers.get("Authorization")))
        status, headers, payload = srv.script.pop(0) if len(srv.script) > 1 else srv.script[0]
        data = json.dumps(payload).encode() if payload is not None else b""
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def err(code, message="x"):
    return {"error": {"code": code, "message": message}}


class TransportTest(unittest.TestCase):

    def serve(self, script):
        srv = Scripted(script)
        self.addCleanup(srv.close)
        t = Transport(srv.url, token="tok", timeout=5)
        t.backoff_initial, t.backoff_max = 0.02, 0.1
        return srv, t

    def test_5xx_is_retried_and_the_token_sent(self):
        srv, t = self.serve([(500, None, err("internal")), (502, None, None), (200, None, {"state": "completed"})])
        self.assertEqual(t.call("POST", "/v1/x", {"a": 1}, window=5), {"state": "completed"})
        self.assertEqual(len(srv.seen), 3)
        self.assertEqual(srv.seen[0][2], {"a": 1})
        self.assertEqual(srv.seen[0][3], "Bearer tok")

    def test_503_honours_retry_after(self):
        srv, t = self.serve([(503, {"Retry-After": "1"}, err("overloaded")), (204, None, None)])
        self.assertIsNone(t.call("POST", "/v1/x", {}, window=5))
        self.assertGreaterEqual(srv.seen[1][0] - srv.seen[0][0], 0.95)

    def test_4xx_is_final_at_once(self):
        for status, code, cls in [(409, "stale_lease", StaleLease), (409, "worker_lost", WorkerLost), (401, "unauthenticated", Unauthorized),
                                  (403, "forbidden", Unauthorized), (400, "invalid_field", APIError), (404, "not_found", APIError)]:
            srv, t = self.serve([(status, None, err(code, "nope"))])
            with self.assertRaises(cls) as cm:
                t.call("POST", "/v1/x", {}, window=5)
            self.assertEqual((cm.exception.status, cm.exception.code, cm.exception.message), (status, code, "nope"))
            self.assertEqual(len(srv.seen), 1, code)

    def test_gives_up_after_the_window_with_the_last_error(self):
        srv, t = self.serve([(500, None, err("internal", "db down"))])
        t0 = time.monotonic()
        with self.assertRaises(ServerUnavailable) as cm:
            t.call("POST", "/v1/x", {}, window=0.5, what="complete of step 1")
        self.assertGreaterEqual(time.monotonic() - t0, 0.5)
        self.assertIn("db down", str(cm.exception))
        self.assertIn("complete of step 1", str(cm.exception))
        self.assertGreater(len(srv.seen), 3)

    def test_connection_refused_is_retried_for_the_window(self):
        t = Transport("http://127.0.0.1:%d" % free_port(), timeout=1)
        t.backoff_initial, t.backoff_max = 0.02, 0.1
        t0 = time.monotonic()
        with self.assertRaises(ServerUnavailable) as cm:
            t.call("POST", "/v1/x", {}, window=0.4)
        self.assertGreaterEqual(time.monotonic() - t0, 0.4)
        self.assertIsInstance(cm.exception.__cause__, OSError)
        self.assertGreater(cm.exception.attempts, 2)

    def test_stop_event_interrupts_retries(self):
        srv, t = self.serve([(500, None, err("internal"))])
        stop = threading.Event()
        threading.Timer(0.2, stop.set).start()
        with self.assertRaises(Interrupted):
            t.call("POST", "/v1/x", {}, window=30, stop=stop)

    def test_body_callable_is_evaluated_per_attempt(self):
        srv, t = self.serve([(500, None, err("internal")), (200, None, {"lost": []})])
        held = [[1]]
        t.call("POST", "/v1/x", lambda: {"steps": held[0]}, window=5)
        self.assertEqual(srv.seen[0][2], {"steps": [1]})


class _NoWorker:
    def _step_progress(self, step, fraction, message):
        return True


class StepTest(unittest.TestCase):
    def step(self, **raw):
        base = {"step_id": 1, "task_id": 2, "step": "s", "handler": "h", "attempt": 1, "fence": {"step_id": 1, "attempt": 1, "lease_id": "9"}}
        base.update(raw)
        return Step(_NoWorker(), base, "w")

    def test_progress_fraction_is_checked_before_sending(self):
        s = self.step()
        for bad in (-0.01, 1.01, float("nan"), True, "0.5", None):
            with self.assertRaises(ValueError, msg=repr(bad)):
                s.progress(bad)
        with self.assertRaises(TypeError):
            s.progress(0.5, message=3)
        self.assertTrue(s.progress(0))
        self.assertTrue(s.progress(1, "done"))

    def test_timeout_and_checkpoint_from_the_claim(self):
        s = self.step(timeout_ms=1500, checkpoint={"k": 1})
        self.assertEqual(s.timeout, 1.5)
        self.assertAlmostEqual(s.time_left(), 1.5, delta=0.2)
        self.assertEqual(s.claimed_checkpoint, {"k": 1})
        self.assertEqual(s.saved_checkpoint, {"k": 1})
        none = self.step()
        self.assertIsNone(none.timeout)
        self.assertIsNone(none.deadline)
        self.assertIsNone(none.time_left())
        self.assertFalse(none.cancelled())

    def test_format_duration_reads_like_go(self):
        self.assertEqual([format_duration(s) for s in (0.3, 1, 1.5, 90, 3600)], ["300ms", "1s", "1.5s", "1m30s", "1h0m0s"])
