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

    def test_worker_handlers_are_listed(self):
        w = self.start_worker("adv", {"py.adv": lambda step: {}})
        workers = self.server.api("GET", "/v1/workers")["workers"]
        mine = [x for x in workers if x["id"] == w.worker_id]
        self.assertEqual(len(mine), 1)
        self.assertEqual(mine[0]["kind"], "remote")
        self.assertEqual(mine[0]["handlers"], ["py.adv"])
