"""Client against a real server: submit, task, signal."""

from weft_worker import APIError, Client

from .base import ServerTestCase
from .weftserver import step_named

GATE = 'namespace: pysig\nname: gate\nversion: "1"\nsteps:\n  - name: approval\n    type: signal\n    signal: {name: go_live}\n'


class ClientTest(ServerTestCase):

    def setUp(self):
        super().setUp()
        self.server.register_workflow(GATE)
        token = self.server.create_key("py-client", "tasks:create,tasks:read,tasks:signal")
        self.client = Client(self.server.url, token=token)

    def test_signal_completes_the_waiting_step(self):
        task = self.client.submit("pysig/gate", {"service": "api"}, key="release-1")
        self.assertEqual(self.client.submit("pysig/gate", key="release-1")["id"], task["id"], "the key finds the task")
        self.client.signal(task["id"], "go_live", {"approved_by": "ops"})
        done = self.server.wait_task(task["id"])
        self.assertEqual(done["state"], "completed")
        self.assertEqual(step_named(done, "approval")["result"], {"signal": "go_live", "payload": {"approved_by": "ops"}})
        self.assertEqual(self.client.task(task["id"])["state"], "completed")

        with self.assertRaises(APIError) as ctx:
            self.client.signal(task["id"], "go_live")
        self.assertEqual(ctx.exception.status, 409)

    def test_signal_errors(self):
        with self.assertRaises(APIError) as ctx:
            self.client.signal(999999, "go_live")
        self.assertEqual(ctx.exception.status, 404)
        task = self.client.submit("pysig/gate")
        with self.assertRaises(APIError) as ctx:
            self.client.signal(task["id"], "no spaces")
        self.assertEqual(ctx.exception.status, 400)
        for bad in (0, -1, "7", True):
            with self.assertRaises(ValueError):
                self.client.signal(bad, "go_live")
        with self.assertRaises(ValueError):
            self.client.signal(task["id"], "")

    def test_permission(self):
        reader = Client(self.server.url, token=self.server.create_key("py-reader", "tasks:read"))
        task = self.client.submit("pysig/gate")
        with self.assertRaises(APIError) as ctx:
            reader.signal(task["id"], "go_live")
        self.assertEqual(ctx.exception.status, 403)
