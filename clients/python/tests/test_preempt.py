"""Preemption of the Python worker's steps: a full worker is asked to stop
a preemptible step for a step of higher priority; a worker with a free slot
is not. And the Step API of preemption on its own."""

import threading
import unittest

from weft_worker import Preempted
from weft_worker.step import Step

from .base import ServerTestCase
from .weftserver import step_named, wait_for


def templates(namespace):
    crunch = ('namespace: %s\nname: crunch\nversion: "1"\nsteps:\n'
              '  - name: crunch\n    handler: py.crunch\n    priority: -1\n    preemptible: true\n') % namespace
    page = ('namespace: %s\nname: page\nversion: "1"\nsteps:\n'
            '  - name: alert\n    handler: py.alert\n    priority: 5\n') % namespace
    return crunch, page


class PreemptTest(ServerTestCase):

    def crunch_handler(self, seen, release):
        """A preemptible handler: saves a checkpoint, then waits until it
        is preempted (or released); a rerun resumes from the checkpoint."""

        def crunch(step):
            seen.append(("start", step.attempt, step.claimed_checkpoint))
            if step.claimed_checkpoint:
                return {"resumed": step.claimed_checkpoint}
            step.checkpoint({"row": 40})
            woke = False
            while not woke and not release.is_set():
                woke = step.wait(0.2)
            seen.append(("woke", step.preempted.is_set(), step.preempt_reason))
            step.raise_if_preempted()
            return {"released": True}

        return crunch

    def test_full_worker_is_preempted_for_a_higher_priority_step(self):
        crunch, page = templates("pre")
        self.register(crunch)
        self.register(page)
        seen, release = [], threading.Event()
        self.addCleanup(release.set)
        self.start_worker("pre", {"py.crunch": self.crunch_handler(seen, release), "py.alert": lambda step: {"paged": True}},
                          concurrency=1)
        low = self.server.submit("pre/crunch")
        wait_for(lambda: step_named(self.server.task(low), "crunch").get("checkpoint"), 10, what="crunch to save its checkpoint")
        high = self.server.submit("pre/page")

        self.assertEqual(self.server.wait_task(high)["state"], "completed")
        task = self.server.wait_task(low)
        self.assertEqual(task["state"], "completed", task)
        crunched = step_named(task, "crunch")
        self.assertEqual(crunched["result"], {"resumed": {"row": 40}})
        self.assertEqual(crunched["attempts"], 1, "the preempted attempt was given back")
        reason = 'preempted by task %d step "alert" (priority 5)' % high
        self.assertEqual(seen, [("start", 1, None), ("woke", True, reason), ("start", 1, {"row": 40})])
        self.assertIn(("running", "ready", reason), [a[:3] for a in self.audit_reasons(low, "crunch")])

    def test_worker_with_a_free_slot_is_not_preempted(self):
        crunch, page = templates("nopre")
        self.register(crunch)
        self.register(page)
        seen, release = [], threading.Event()
        self.addCleanup(release.set)
        self.start_worker("nopre", {"py.crunch": self.crunch_handler(seen, release), "py.alert": lambda step: {"paged": True}},
                          concurrency=2)
        low = self.server.submit("nopre/crunch")
        wait_for(lambda: step_named(self.server.task(low), "crunch").get("checkpoint"), 10, what="crunch to save its checkpoint")
        high = self.server.submit("nopre/page")
        self.assertEqual(self.server.wait_task(high)["state"], "completed", "run on the free slot")
        release.set()
        task = self.server.wait_task(low)
        self.assertEqual(step_named(task, "crunch")["result"], {"released": True})
        self.assertEqual(seen, [("start", 1, None), ("woke", False, None)])


    def test_a_result_returned_anyway_completes(self):
        crunch, page = templates("prek")
        self.register(crunch)
        self.register(page)

        def stubborn(step):
            if not step.preempted.wait(30):
                raise RuntimeError("never preempted")
            return {"finished": "anyway"}

        self.start_worker("prek", {"py.crunch": stubborn, "py.alert": lambda step: {"paged": True}}, concurrency=1)
        low = self.server.submit("prek/crunch")
        wait_for(lambda: step_named(self.server.task(low), "crunch").get("state") == "running", 10, what="crunch to run")
        high = self.server.submit("prek/page")
        task = self.server.wait_task(low)
        self.assertEqual(task["state"], "completed", task)
        self.assertEqual(step_named(task, "crunch")["result"], {"finished": "anyway"})
        self.assertEqual(self.server.wait_task(high)["state"], "completed")
        self.assertNotIn(("running", "ready"), [a[:2] for a in self.audit_reasons(low, "crunch")])


class StepPreemptionTest(unittest.TestCase):
    """The Step API of preemption, without a server."""

    def step(self):
        return Step(None, {"step_id": 1, "fence": {"step_id": 1, "attempt": 1, "lease_id": "7"}}, "w")

    def test_preempted_wakes_wait_and_raises(self):
        s = self.step()
        self.assertFalse(s.wait(0))
        s.raise_if_preempted()  # not preempted: nothing
        threading.Timer(0.05, s._preempted_by, ('preempted by task 2 step "alert" (priority 5)',)).start()
        self.assertTrue(s.wait(10), "wait() wakes when the step is preempted")
        self.assertTrue(s.preempted.is_set())
        self.assertFalse(s.cancelled(), "preempted is not cancelled: the handler may still checkpoint")
        with self.assertRaises(Preempted) as cm:
            s.raise_if_preempted()
        self.assertIn('step "alert"', str(cm.exception))
