"""Durable functions in Python against a real `weft serve`: the server
records the calls, the worker replays the function over them."""

import threading
import time

from weft_worker import CallError, Permanent

from .base import ServerTestCase
from .weftserver import step_named


def function_workflow(namespace, handler, name="fn"):
    return "namespace: %s\nname: %s\nversion: \"1\"\nsteps:\n  - name: function\n    type: function\n    handler: %s\n" % (
        namespace, name, handler)


class FunctionTest(ServerTestCase):

    def test_calls_run_once_and_the_function_resumes(self):
        ns = "pyfn"
        self.server.register_workflow(function_workflow(ns, "pyfn.checkout"))
        self.server.register_workflow("namespace: %s\nname: label\nversion: \"1\"\nsteps:\n  - name: print\n    handler: exec\n"
                                      "    config: {command: [\"cat\"]}\n" % ns)
        ran = {}
        lock = threading.Lock()

        def count(name, value):
            with lock:
                ran[name] = ran.get(name, 0) + 1
            return value

        def checkout(fn, order):
            charge = fn.step("charge", lambda: count("charge", "ch_%s" % order["id"]), max_attempts=2)
            a = fn.go("tax", lambda: count("tax", order["amount"] // 10))
            b = fn.go("fee", lambda: count("fee", 1))
            total = order["amount"] + a.get() + b.get()
            fn.sleep(0.05)
            approval = fn.wait_signal("approval", timeout=60)
            label = fn.child("%s/label" % ns, {"order": order["id"]})
            return {"charge": charge, "total": total, "by": approval["by"], "label": label["print"]["input"]["order"]}

        self.start_worker(ns, {}, functions={"pyfn.checkout": checkout})
        tid = self.server.submit("%s/fn" % ns, {"id": "A1", "amount": 100})
        self.server.api("POST", "/v1/tasks/%d/signals/approval" % tid, {"payload": {"by": "ada"}})
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(step_named(task, "function")["result"], {"charge": "ch_A1", "total": 111, "by": "ada", "label": "A1"})
        self.assertEqual([s["name"] for s in task["steps"]], ["function", "charge", "tax", "fee", "sleep", "approval", "label"])
        self.assertEqual(ran, {"charge": 1, "tax": 1, "fee": 1})

    def test_snoozes_without_an_attempt_while_a_retried_call_has_not_ended(self):
        ns = "pyfnsnooze"
        # One attempt for the function step: a wait that used it would fail the task.
        self.server.register_workflow("namespace: %s\nname: fn\nversion: \"1\"\nsteps:\n  - name: function\n    type: function\n"
                                      "    handler: %s.flaky\n    retry: {max_attempts: 1}\n" % (ns, ns))
        tries = []

        def call():
            tries.append(1)
            if len(tries) == 1:
                raise ValueError("down")
            time.sleep(1.5)
            return "up"

        def flaky(fn, inp):
            return "after " + fn.step("flaky", call, max_attempts=1)

        self.start_worker(ns, {}, functions={"%s.flaky" % ns: flaky})
        tid = self.server.submit("%s/fn" % ns)
        self.assertEqual(self.server.wait_task(tid)["state"], "failed")
        self.server.api("POST", "/v1/tasks/%d/retry" % tid)
        task = self.server.wait_task(tid)
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(step_named(task, "function")["result"], "after up")
        self.assertEqual(step_named(task, "function")["attempts"], 1)
        audit = self.audit_reasons(tid, "function")
        retried = [i for i, a in enumerate(audit) if a[2] == "task retried"]
        self.assertTrue(retried, audit)
        self.assertTrue(any(a[1] == "waiting" and "the function waits for a call that has not ended" in a[2]
                            for a in audit[retried[0]:]), audit)
        self.assertEqual({a[4] for a in audit if a[4] is not None}, {1}, audit)

    def test_failed_call_and_non_determinism(self):
        ns = "pyfnfail"
        self.server.register_workflow(function_workflow(ns, "pyfnfail.pay", name="pay"))
        self.server.register_workflow(function_workflow(ns, "pyfnfail.drift", name="drift"))
        runs = []

        def pay(fn, inp):
            try:
                fn.step("charge", lambda: (_ for _ in ()).throw(ValueError("card declined")), max_attempts=1)
            except CallError as e:
                if inp.get("handle"):
                    return fn.step("notify", lambda: "told: " + e.message)
                raise
            return "paid"

        def drift(fn, inp):
            runs.append(1)
            return fn.step("first" if len(runs) == 1 else "second", lambda: 1)

        self.start_worker(ns, {}, functions={"pyfnfail.pay": pay, "pyfnfail.drift": drift})
        handled = self.server.wait_task(self.server.submit("%s/pay" % ns, {"handle": True}))
        self.assertEqual(step_named(handled, "function")["result"], "told: ValueError: card declined (attempt 1 of 1)")
        passed = self.server.wait_task(self.server.submit("%s/pay" % ns, {"handle": False}))
        self.assertEqual(passed["state"], "failed")
        self.assertIn('call "charge" failed: ValueError: card declined', step_named(passed, "function")["error"])
        self.assertEqual(step_named(passed, "function")["attempts"], 1)
        drifted = self.server.wait_task(self.server.submit("%s/drift" % ns))
        self.assertEqual(drifted["state"], "failed")
        self.assertIn('non-determinism: call 1 is step "second", but the task recorded step "first" there',
                      step_named(drifted, "function")["error"])

    def test_server_refuses_bad_calls(self):
        ns = "pyfnbad"
        self.server.register_workflow(function_workflow(ns, "pyfnbad.bad"))

        def bad(fn, inp):
            fn.step("ok", lambda: 1)
            fn.child("nonamespace", {})

        self.start_worker(ns, {}, functions={"pyfnbad.bad": bad})
        task = self.server.wait_task(self.server.submit("%s/fn" % ns))
        self.assertEqual(task["state"], "failed", task)
        err = step_named(task, "function")["error"]
        self.assertIn("the server refused the report", err)
        self.assertIn("calls[0].workflow", err)


if __name__ == "__main__":
    import unittest
    unittest.main()
