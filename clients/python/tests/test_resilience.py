"""The worker when the server goes away and when it refuses the worker."""

import threading
import time

from weft_worker import Unauthorized, Worker

from .base import ServerTestCase
from .weftserver import step_named, wait_for


class ServerRestartTest(ServerTestCase):
    """Kills the server (SIGKILL) while a step's outcome is being reported."""

    def test_report_lands_after_the_server_restarts(self):
        self.server.register_workflow("""
namespace: crash
name: wf
version: "1"
steps:
  - name: report
    handler: py.report
""")
        started, release = threading.Event(), threading.Event()
        self.addCleanup(release.set)

        def report(step):
            started.set()
            release.wait(20)
            return {"ok": True, "attempt": step.attempt}

        w = self.start_worker("crash", {"py.report": report})
        tid = self.server.submit("crash/wf")
        wait_for(started.is_set, 10, what="the handler to start")
        self.server.kill()
        release.set()  # the handler returns while the server is down
        wait_for(lambda: self.logs.find("complete of step", "retrying"), 10, what="the complete to be retried")
        self.server.start()  # same database and port, well within the 30s lease
        task = self.server.wait_task(tid, timeout=30)
        self.assertEqual(task["state"], "completed", task)
        step = step_named(task, "report")
        self.assertEqual(step["result"], {"ok": True, "attempt": 1}, "the first attempt's outcome landed")
        self.assertEqual(step["attempts"], 1)
        self.assertEqual(step["engine_id"], w.worker_id)
        # The worker hears the answer a moment after the task ended.
        wait_for(lambda: self.logs.find("complete recorded"), 5, what="the worker to log the recorded outcome")


class RefusedTest(ServerTestCase):
    """A wrong token or a missing permission stops the worker at once."""

    def run_worker(self, token):
        w = Worker(self.server.url, token=token, name="refused", namespaces=["refused"])
        w.handler("py.never")(lambda step: None)
        t0 = time.monotonic()
        with self.assertRaises(Unauthorized) as cm:
            w.run(install_signals=False)
        self.assertLess(time.monotonic() - t0, 5, "refused credentials are not retried")
        return cm.exception

    def test_wrong_token_fails_fast_with_a_clear_error(self):
        err = self.run_worker("weft_0123456789abcdef_not-a-real-secret")
        self.assertEqual(err.status, 401)
        self.assertIn("token", str(err))

    def test_token_without_workers_connect_fails_fast(self):
        err = self.run_worker(self.server.create_key("reader", "tasks:read"))
        self.assertEqual(err.status, 403)
        self.assertIn("workers:connect", str(err))
