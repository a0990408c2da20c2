"""Client.submit with tags, and the worker's handlers advertised to
`weft workers`."""

from weft_worker import APIError, Client

from .base import ServerTestCase


class SubmitTest(ServerTestCase):

    def test_submit_with_tags(self):
        self.register('namespace: sub\nname: wf\nversion: "1"\nsteps:\n  - name: a\n    handler: nobody.sub\n')
        c = Client(self.server.url, token=self.server.create_key("py-submit", "tasks:*"))
        task = c.submit("sub/wf", {"n": 1}, tags={"env": "staging", "team": "py"}, key="k1")
        self.assertEqual(task["tags"], {"env": "staging", "team": "py"})
        again = c.submit("sub/wf", {"n": 1}, key="k1")
        self.assertEqual(again["id"], task["id"])
        listed = self.server.api("GET", "/v1/tasks?tag=env%3Dstaging&tag=team%3Dpy")["tasks"]
        self.assertEqual([t["id"] for t in listed], [task["id"]])
        with self.assertRaises(APIError) as err:
            c.submit("sub/wf", tags={"bad key": "x"})
        self.assertEqual(err.exception.field, "tags")
        with self.assertRaises(TypeError):
            c.submit("sub/wf", tags={"n": 1})

    def test_submit_many(self):
        self.register('namespace: sub\nname: many\nversion: "1"\nsteps:\n  - name: a\n    handler: nobody.many\n')
        c = Client(self.server.url, token=self.server.create_key("py-many", "tasks:*"))
        first = c.submit("sub/many", key="m0")
        tasks = c.submit_many([
            {"workflow": "sub/many", "input": {"n": 1}},
            {"workflow": "sub/many", "key": "m0"},
            {"workflow": "sub/many", "priority": 3, "tags": {"env": "test"}},
        ])
        self.assertEqual(len(tasks), 3)
        self.assertNotIn("duplicate", tasks[0])
        self.assertTrue(tasks[1]["duplicate"])
        self.assertEqual(tasks[1]["id"], first["id"])
        self.assertEqual(tasks[2]["priority"], 3)
        before = len(self.server.api("GET", "/v1/tasks?workflow=sub/many")["tasks"])
        with self.assertRaises(APIError) as err:
            c.submit_many([{"workflow": "sub/many"}, {"workflow": "sub/many", "priority": 10**9}])
        self.assertEqual(err.exception.field, "tasks[1].priority")
        self.assertEqual(len(self.server.api("GET", "/v1/tasks?workflow=sub/many")["tasks"]), before)
        with self.assertRaises(ValueError):
            c.submit_many([{"workflow": "sub/many", "kee": "typo"}])

    def test_worker_handlers_are_listed(self):
        w = self.start_worker("adv", {"py.adv": lambda step: {}})
        workers = self.server.api("GET", "/v1/workers")["workers"]
        mine = [x for x in workers if x["id"] == w.worker_id]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["kind"], "remote")
        self.assertEqual(mine[0]["handlers"], ["py.adv"])
