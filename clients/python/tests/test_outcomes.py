"""Outcomes a store cannot keep as they are: whatever a handler returns or
raises, its step ends (failed for good, or retried by its policy with its
error text sanitized) after one run per attempt, never reclaimed and run
again behind its attempts' back."""

import threading

from .base import ServerTestCase
from .weftserver import step_named


def workflow(namespace, handler):
    return ("namespace: %s\nname: wf\nversion: \"1\"\nsteps:\n  - name: s\n    handler: %s\n"
            "    retry: {max_attempts: 2, backoff: fixed, initial: 50ms}\n" % (namespace, handler))


class OutcomeBytesTest(ServerTestCase):

    def run_case(self, namespace, fn):
        """Run fn as the handler of a one-step task; return the task and how
        many times fn ran."""
        self.register(workflow(namespace, "py." + namespace))
        runs = []
        lock = threading.Lock()

        def handler(step):
            with lock:
                runs.append(step.attempt)
            return fn(step)

        self.start_worker(namespace, {"py." + namespace: handler})
        task = self.server.wait_task(self.server.submit(namespace + "/wf"))
        return task, runs

    def assert_ends(self, task, runs, state, attempts, error):
        step = step_named(task, "s")
        self.assertEqual(task["state"], "failed" if state == "failed" else "completed", task)
        self.assertEqual(step["state"], state, step)
        self.assertEqual(step["attempts"], attempts, step)
        self.assertEqual(runs, list(range(1, attempts + 1)), "one run per attempt, none behind their count")
        self.assertIn(error, step.get("error", ""), step)
        self.assertNotIn("\x00", step.get("error", ""))
        for _, _, reason, _, _ in self.audit_reasons(task["id"], "s"):
            self.assertNotIn("lease lapsed", reason)

    def test_nul_in_result_fails_for_good(self):
        task, runs = self.run_case("nulresult", lambda step: {"v": "a\x00b"})
        self.assert_ends(task, runs, "failed", 1, "result cannot be stored: result.v contains a NUL character")

    def test_result_not_utf8_fails_for_good(self):
        # Bytes that are not UTF-8, decoded with surrogateescape: lone
        # surrogates, which JSON carries as \\udcff escapes.
        task, runs = self.run_case("badutf8", lambda step: {"v": b"a\xffb".decode("utf-8", "surrogateescape")})
        self.assert_ends(task, runs, "failed", 1, "result cannot be stored: result.v contains a \\u escape of a lone UTF-16 surrogate")

    def test_nul_in_error_is_sanitized_and_retried(self):
        def fail(step):
            raise ValueError("bad \x00 error \udcff")

        task, runs = self.run_case("nulerror", fail)
        self.assert_ends(task, runs, "failed", 2, "ValueError: bad \ufffd error \ufffd")

    def test_result_too_large_fails_for_good(self):
        # Larger than the server's --max-body (1 MiB): refused with 413,
        # reported as a permanent failure instead.
        task, runs = self.run_case("toolarge", lambda step: {"v": "x" * (2 << 20)})
        self.assert_ends(task, runs, "failed", 1, "the server refused the result: 413 body_too_large")
        self.assertTrue(self.logs.find("complete of step", "refused", "reporting the attempt failed instead"), self.logs.messages())
