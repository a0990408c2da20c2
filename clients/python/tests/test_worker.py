"""The Python worker against a real `weft serve`: outcomes, retries,
snoozes, checkpoints, progress, timeouts, heartbeats, re-registration and stop."""

import threading
import time

from weft_worker import Permanent, Snooze, StaleLease

from .base import ServerTestCase
from .weftserver import step_named, wait_for


def workflow(namespace, steps):
    return "namespace: %s\nname: wf\nversion: \"1\"\nsteps:\n%s" % (namespace, steps)


FAST_RETRY = "retry: {max_attempts: 3, backoff: fixed, initial: 100ms}"


class WorkerTest(ServerTestCase):

    def test_results_flow_to_dependent_steps(self):
        self.register(workflow("flow", """
  - name: double
    handler: py.double
  - name: add
    handler: py.add
    depends_on: [double]
    config: {plus: 1}
  - name: echo
    handler: exec
    depends_on: [add]
    config: {command: ["cat"]}
"""))
        w = self.start_worker("flow", {
            "py.double": lambda step: {"n": step.input["n"] * 2},
            "py.add": lambda step: {"n": step.deps["double"]["n"] + step.config["plus"], "attempt": step.attempt},
        })
        task = self.server.wait_task(self.server.submit("flow/wf", {"n": 3}))
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(step_named(task, "double")["result"], {"n": 6})
        add = step_named(task, "add")
        self.assertEqual(add["result"], {"n": 7, "attempt": 1})
        self.assertEqual(add["engine_id"], w.worker_id, "run by the Python worker")
        # The built-in exec step (run by the server's engine) got the Python result.
        self.assertEqual(step_named(task, "echo")["result"]["deps"]["add"], {"n": 7, "attempt": 1})

    def test_retryable_failure_is_retried_then_completes(self):
        self.register(workflow("retry", """
  - name: flaky
    handler: py.flaky
    %s
""" % FAST_RETRY))

        def flaky(step):
            if step.attempt == 1:
                raise ValueError("flaky backend")
            return {"attempt": step.attempt}

        self.start_worker("retry", {"py.flaky": flaky})
        tid = self.server.submit("retry/wf")
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        step = step_named(task, "flaky")
        self.assertEqual(step["result"], {"attempt": 2})
        self.assertEqual(step["attempts"], 2)
        self.assertTrue(any("ValueError: flaky backend" in r for _, _, r, _, _ in self.audit_reasons(tid, "flaky")),
                        self.audit_reasons(tid, "flaky"))

    def test_permanent_fails_at_once(self):
        self.register(workflow("perm", """
  - name: strict
    handler: py.strict
    %s
""" % FAST_RETRY))

        def strict(step):
            raise Permanent("input is not valid")

        self.start_worker("perm", {"py.strict": strict})
        task = self.server.wait_task(self.server.submit("perm/wf"))
        self.assertEqual(task["state"], "failed", task)
        step = step_named(task, "strict")
        self.assertEqual(step["state"], "failed")
        self.assertEqual(step["attempts"], 1, "no retry after Permanent")
        self.assertIn("input is not valid", step["error"])

    def test_snoozed_step_runs_again_with_the_same_attempt_and_completes(self):
        # One attempt only: a snooze that used it would fail the step.
        self.register(workflow("snooze", """
  - name: notyet
    handler: py.notyet
    retry: {max_attempts: 1}
"""))
        attempts = []

        def notyet(step):
            attempts.append(step.attempt)
            if len(attempts) == 1:
                raise Snooze(0.3, "the export is not ready yet")
            return {"runs": len(attempts), "attempt": step.attempt}

        self.start_worker("snooze", {"py.notyet": notyet})
        tid = self.server.submit("snooze/wf")
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        step = step_named(task, "notyet")
        self.assertEqual((step["result"], step["attempts"]), ({"runs": 2, "attempt": 1}, 1))
        self.assertEqual(attempts, [1, 1], "run again with the same attempt number")
        audit = [e for e in self.server.audit(tid) if e.get("step") == "notyet"]
        snoozed = [e for e in audit if e.get("from") == "running" and "the export is not ready yet" in e.get("reason", "")]
        again = [e for e in audit if e.get("to") == "running"]
        self.assertTrue(snoozed and again and snoozed[0]["to"] != "failed", audit)
        self.assertEqual(again[-1]["attempt"], 1, audit)
        self.assertTrue(any("snoozed for 300ms: the export is not ready yet" in m for m in self.logs.messages()), self.logs.messages())

    def test_checkpoint_of_attempt_one_is_seen_by_attempt_two(self):
        self.register(workflow("ckpt", """
  - name: resumable
    handler: py.resumable
    %s
""" % FAST_RETRY))
        seen = []

        def resumable(step):
            seen.append((step.attempt, step.claimed_checkpoint))
            if step.attempt == 1:
                step.checkpoint({"rows_done": 500})
                self.assertEqual(step.saved_checkpoint, {"rows_done": 500})
                raise RuntimeError("crashed after the checkpoint")
            return {"resumed_from": step.claimed_checkpoint}

        self.start_worker("ckpt", {"py.resumable": resumable})
        task = self.server.wait_task(self.server.submit("ckpt/wf"))
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(seen, [(1, None), (2, {"rows_done": 500})])
        self.assertEqual(step_named(task, "resumable")["result"], {"resumed_from": {"rows_done": 500}})

    def test_progress_is_visible_while_running(self):
        # Needs POST /v1/workers/{id}/progress on the server.
        self.register(workflow("prog", """
  - name: long
    handler: py.long
"""))
        release = threading.Event()
        self.addCleanup(release.set)
        recorded = []

        def long(step):
            recorded.append(step.progress(0.5, "half way"))
            release.wait(10)
            recorded.append(step.progress(1, "done"))
            return {"ok": True}

        self.start_worker("prog", {"py.long": long})
        tid = self.server.submit("prog/wf")
        try:
            wait_for(lambda: step_named(self.server.task(tid), "long").get("progress") == 0.5, 5,
                     what="progress 0.5 on the running step")
            self.assertEqual(step_named(self.server.task(tid), "long").get("progress_message"), "half way")
        finally:
            release.set()
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(recorded, [True, True])
        step = step_named(task, "long")
        self.assertEqual((step.get("progress"), step.get("progress_message")), (1.0, "done"))

    def test_timeout_is_reported_by_the_worker_and_retried(self):
        self.register(workflow("tmo", """
  - name: slow
    handler: py.slow
    timeout: 1s
    %s
""" % FAST_RETRY))
        late = []

        def slow(step):
            if step.attempt == 1:
                self.assertEqual(step.timeout, 1.0)
                self.assertIsNotNone(step.deadline)
                time.sleep(4)  # ignores its timeout, as a stuck handler would
                late.append(step.cancelled())
                return {"late": True}
            return {"attempt": step.attempt}

        w = self.start_worker("tmo", {"py.slow": slow})
        tid = self.server.submit("tmo/wf")
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(late, [], "attempt 2 ran without waiting for attempt 1's handler")
        reasons = self.audit_reasons(tid, "slow")
        self.assertTrue(any("step timed out after 1s" in r and eng == w.worker_id for _, _, r, eng, _ in reasons), reasons)
        # The late return of attempt 1 is ignored: it knows it was cancelled,
        # and the result stays attempt 2's.
        wait_for(lambda: late, 5, what="attempt 1's handler to return")
        self.assertEqual(late, [True])
        wait_for(lambda: self.logs.find("returned after the step was timed out"), 2, what="the late return to be logged")
        step = step_named(self.server.task(tid), "slow")
        self.assertEqual((step["result"], step["attempts"]), ({"attempt": 2}, 2))

    def test_cancelled_task_marks_the_step_lost(self):
        # The heartbeat answers {"lost": [fence]} for a step that is no longer running.
        self.register(workflow("lost", """
  - name: waiting
    handler: py.waiting
"""))
        started, outcome = threading.Event(), []

        def waiting(step):
            started.set()
            cancelled = step.wait(15)
            outcome.append((cancelled, step.lost.is_set()))
            return {"finished": True}

        w = self.start_worker("lost", {"py.waiting": waiting})
        tid = self.server.submit("lost/wf")
        wait_for(started.is_set, 10, what="the handler to start")
        self.server.api("POST", "/v1/tasks/%d/cancel" % tid, {})
        wait_for(lambda: outcome, 5, what="the handler to see its step lost")
        self.assertEqual(outcome, [(True, True)])
        wait_for(lambda: w.held() == [], 5, what="the worker to stop listing the step")
        task = self.server.task(tid)
        self.assertEqual(task["state"], "cancelled")
        self.assertEqual(step_named(task, "waiting")["state"], "cancelled")
        self.assertIsNone(self.logs.find("complete recorded"))

    def test_heartbeat_lists_steps_while_their_report_is_retried(self):
        self.register(workflow("hb", """
  - name: held
    handler: py.held
"""))
        release = threading.Event()
        self.addCleanup(release.set)
        w = self.start_worker("hb", {"py.held": lambda step: release.wait(10) and {"ok": True}})
        beats, refused, refusing = [], [], threading.Event()
        refusing.set()
        self.addCleanup(refusing.clear)
        real = w._transport.request

        def spy(method, path, body=None, **kw):
            if path.endswith("/heartbeat"):
                beats.append([f["step_id"] for f in body["steps"]])
            if path.endswith("/complete") and refusing.is_set():
                refused.append(path)
                raise ConnectionRefusedError("test: the server is away")
            return real(method, path, body, **kw)

        w._transport.request = spy
        tid = self.server.submit("hb/wf")
        sid = wait_for(lambda: [s["id"] for s in self.server.task(tid)["steps"] if s["state"] == "running"], 10,
                       what="the step to run")[0]
        wait_for(lambda: any(sid in b for b in beats), 5, what="a heartbeat listing the running step")
        release.set()
        wait_for(lambda: refused, 5, what="the complete to be refused")
        n = len(beats)
        wait_for(lambda: len(beats) > n, 5, what="a heartbeat while the report is retried")
        self.assertIn(sid, beats[n], "the step is listed while its outcome is being retried")
        refusing.clear()
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        self.assertGreaterEqual(len(refused), 1)
        wait_for(lambda: w.held() == [], 5, what="the settled step to leave the listing")

    def test_worker_declared_dead_registers_again(self):
        self.register(workflow("rejoin", """
  - name: work
    handler: py.work
"""))
        w = self.start_worker("rejoin", {"py.work": lambda step: {"by": step.worker_id}})
        old = w.worker_id
        # As if the reaper had declared it dead. Only the credential that
        # registered a worker may remove it.
        self.server.api("DELETE", "/v1/workers/" + old, token=self.worker_token)
        wait_for(lambda: w.worker_id != old, 10, what="the worker to register again")
        self.assertTrue(self.logs.find("unknown to the server", "registering again"))
        task = self.server.wait_task(self.server.submit("rejoin/wf"))
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(step_named(task, "work")["engine_id"], w.worker_id)
        self.assertEqual(w.run_errors, [])

    def test_stop_drains_running_handlers_and_deregisters(self):
        self.register(workflow("drain", """
  - name: busy
    handler: py.busy
"""))
        started = threading.Event()

        def busy(step):
            started.set()
            time.sleep(1)
            return {"done": True}

        w = self.start_worker("drain", {"py.busy": busy})
        tid = self.server.submit("drain/wf")
        wait_for(started.is_set, 10, what="the handler to start")
        w.stop()
        w.thread.join(10)
        self.assertFalse(w.thread.is_alive(), "run() returned after draining")
        self.assertEqual(w.run_errors, [])
        task = self.server.task(tid)
        self.assertEqual(task["state"], "completed", "the running step finished and was reported before the worker left")
        # Deregistered: its credential hears that the worker is lost, and
        # another credential does not learn that it exists.
        with self.assertRaises(Exception) as cm:
            self.server.api("POST", "/v1/workers/%s/heartbeat" % w.worker_id, {"steps": []}, token=self.worker_token)
        self.assertIn("worker_lost", str(cm.exception))
        with self.assertRaises(Exception) as cm:
            self.server.api("POST", "/v1/workers/%s/heartbeat" % w.worker_id, {"steps": []})
        self.assertIn("not_found", str(cm.exception))

    def test_stop_while_idle_is_prompt(self):
        self.register(workflow("idle", """
  - name: never
    handler: py.never
"""))
        w = self.start_worker("idle", {"py.never": lambda step: None}, wait=20.0)
        wait_for(lambda: w._transport._abortable, 5, what="the claim's long poll to start")  # stop() must cut it short
        t0 = time.monotonic()
        w.stop()
        w.thread.join(10)
        self.assertFalse(w.thread.is_alive())
        self.assertLess(time.monotonic() - t0, 3.0, "stop() waited for the long poll")

    def test_checkpoint_after_timeout_is_refused_locally(self):
        self.register(workflow("late", """
  - name: late
    handler: py.late
    timeout: 300ms
    retry: {max_attempts: 1}
"""))
        raised = []

        def late(step):
            step.wait(5)
            try:
                step.checkpoint({"too": "late"})
            except StaleLease as e:
                raised.append(e)
            return None

        self.start_worker("late", {"py.late": late})
        tid = self.server.submit("late/wf")
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "failed", task)
        self.assertIn("step timed out after 300ms", step_named(task, "late")["error"])
        wait_for(lambda: raised, 5, what="the late checkpoint to be refused")
        self.assertIsNone(step_named(self.server.task(tid), "late").get("checkpoint"))


class TraceTest(ServerTestCase):

    def test_step_carries_the_submitters_traceparent(self):
        self.register(workflow("traced", """
  - name: show
    handler: py.show
"""))
        self.start_worker("traced", {"py.show": lambda step: {"traceparent": step.traceparent, "tracestate": step.tracestate}})
        caller = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        traced = self.server.submit("traced/wf", {}, headers={"traceparent": caller, "tracestate": "vendor=abc"})
        plain = self.server.submit("traced/wf", {})
        task = self.server.wait_task(traced)
        self.assertEqual(task["state"], "completed", task)
        # The server traces nothing here: the worker gets the caller's own
        # span, with its tracestate.
        self.assertEqual(step_named(task, "show")["result"], {"traceparent": caller, "tracestate": "vendor=abc"})
        # A task submitted outside any trace starts its own.
        task = self.server.wait_task(plain)
        own = step_named(task, "show")["result"]["traceparent"]
        self.assertRegex(own, r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")
        self.assertNotIn("4bf92f3577b34da6a3ce929d0e0e4736", own)
