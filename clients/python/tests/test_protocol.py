"""The server's side of the worker protocol that the Python worker relies
on, spoken over raw HTTP (no Worker): heartbeat release of unlisted steps,
the progress endpoint, and the server's own enforcement of step timeouts."""

import time

from weft_worker.transport import Transport
from weft_worker import APIError, StaleLease

from .base import ServerTestCase
from .weftserver import wait_for


class ProtocolTest(ServerTestCase):

    def worker(self, namespace, handler):
        t = Transport(self.server.url, token=self.worker_token, timeout=10)
        reg = t.request("POST", "/v1/workers", {"name": namespace, "handlers": [handler], "namespaces": [namespace]})
        wid = reg["worker_id"]
        self.addCleanup(lambda: t.request("DELETE", "/v1/workers/" + wid))
        return t, wid, reg

    def claim_one(self, t, wid, namespace, handler, wait_ms=5000):
        resp = t.request("POST", "/v1/workers/%s/claim" % wid, {"handlers": [handler], "namespaces": [namespace], "max": 1, "wait_ms": wait_ms},
                         timeout=wait_ms / 1000 + 10)
        self.assertEqual(len(resp["steps"]), 1, resp)
        return resp["steps"][0]

    def step_state(self, step_id):
        return self.server.api("GET", "/v1/steps/%d" % step_id)["state"]

    def test_heartbeat_releases_steps_it_does_not_list(self):
        self.server.register_workflow('namespace: rel\nname: wf\nversion: "1"\nsteps:\n  - name: a\n    handler: raw.rel\n')
        t, wid, reg = self.worker("rel", "raw.rel")
        self.server.submit("rel/wf")
        step = self.claim_one(t, wid, "rel", "raw.rel")
        beat = t.request("POST", "/v1/workers/%s/heartbeat" % wid, {"steps": [step["fence"]]})
        self.assertEqual(beat["lost"], [])
        # The server releases only steps claimed more than two heartbeat
        # intervals ago (so that a heartbeat racing a claim does not release
        # it): let that time pass.
        time.sleep(2 * reg["heartbeat_interval_ms"] / 1000.0 + 0.5)
        t.request("POST", "/v1/workers/%s/heartbeat" % wid, {"steps": []})
        wait_for(lambda: self.step_state(step["step_id"]) != "running", 3,
                 what="the server to release the step the heartbeat did not list")
        with self.assertRaises(StaleLease):
            t.request("POST", "/v1/workers/%s/complete" % wid, {"fence": step["fence"], "result": 1})

    def test_progress_endpoint(self):
        self.server.register_workflow('namespace: progp\nname: wf\nversion: "1"\nsteps:\n  - name: a\n    handler: raw.prog\n')
        t, wid, _ = self.worker("progp", "raw.prog")
        tid = self.server.submit("progp/wf")
        step = self.claim_one(t, wid, "progp", "raw.prog")
        path = "/v1/workers/%s/progress" % wid
        self.assertIsNone(t.request("POST", path, {"fence": step["fence"], "fraction": 0.25, "message": "a quarter"}))
        got = [s for s in self.server.task(tid)["steps"] if s["id"] == step["step_id"]][0]
        self.assertEqual((got.get("progress"), got.get("progress_message")), (0.25, "a quarter"))
        with self.assertRaises(APIError) as cm:
            t.request("POST", path, {"fence": step["fence"], "fraction": 1.5})
        self.assertEqual(cm.exception.status, 400)
        stale = dict(step["fence"], attempt=step["fence"]["attempt"] + 1)
        with self.assertRaises(StaleLease):
            t.request("POST", path, {"fence": stale, "fraction": 0.5})

    def test_server_fails_a_step_whose_timeout_passed(self):
        # A worker that ignores timeouts (and keeps listing the step) cannot hold it forever.
        self.server.register_workflow('namespace: stmo\nname: wf\nversion: "1"\nsteps:\n'
                                      '  - name: a\n    handler: raw.tmo\n    timeout: 1s\n    retry: {max_attempts: 1}\n')
        t, wid, _ = self.worker("stmo", "raw.tmo")
        tid = self.server.submit("stmo/wf")
        step = self.claim_one(t, wid, "stmo", "raw.tmo")
        self.assertEqual(step["timeout_ms"], 1000)

        def ended():
            t.request("POST", "/v1/workers/%s/heartbeat" % wid, {"steps": [step["fence"]]})
            return self.server.task(tid)["state"] in ("failed", "completed")

        wait_for(ended, 12, interval=0.5, what="the server to fail the step after its 1s timeout")
        self.assertEqual(self.server.task(tid)["state"], "failed")
