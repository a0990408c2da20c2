"""A TestCase with a real weft server and in-process Python workers."""

import logging
import threading
import unittest

from weft_worker import Worker

from .weftserver import LogCapture, WeftServer, wait_for


class ServerTestCase(unittest.TestCase):
    """Starts one `weft serve` for the class. Each test uses its own
    namespace and handler names, so that tests do not see each other's work."""

    server = None
    worker_token = None

    @classmethod
    def setUpClass(cls):
        cls.server = WeftServer().start()
        cls.worker_token = cls.server.create_key("py-worker", "workers:connect")

    @classmethod
    def tearDownClass(cls):
        if cls.server is not None:
            cls.server.close()

    def setUp(self):
        self.logs = LogCapture()
        logger = logging.getLogger("weft_worker")
        logger.addHandler(self.logs)
        old_level = logger.level
        logger.setLevel(logging.DEBUG)
        logger.propagate = False

        def restore():
            logger.removeHandler(self.logs)
            logger.setLevel(old_level)
            logger.propagate = True

        self.addCleanup(restore)

    def run(self, result=None):
        # On failure, what the worker said helps: print its log.
        before = (len(result.failures), len(result.errors)) if result is not None else None
        out = super().run(result)
        logs = getattr(self, "logs", None)
        if result is not None and logs is not None and logs.messages() and (len(result.failures), len(result.errors)) != before:
            print("\n--- weft_worker log of %s ---\n%s" % (self.id(), "\n".join(logs.messages())))
        return out

    def start_worker(self, namespace, handlers, functions=None, **kw):
        """Run a Worker serving handlers ({name: fn}) and durable functions
        ({name: fn}) in namespace on a thread until the test ends; return it
        once registered."""
        opts = dict(name=namespace, namespaces=[namespace], heartbeat_interval=0.5, drain_timeout=5.0, concurrency=4)
        opts.update(kw)
        w = Worker(self.server.url, token=self.worker_token, **opts)
        for name, fn in handlers.items():
            w.handler(name)(fn)
        for name, fn in (functions or {}).items():
            w.function(name)(fn)
        w.run_errors = []

        def run():
            try:
                w.run(install_signals=False)
            except BaseException as e:  # noqa: BLE001 - reported by the test
                w.run_errors.append(e)

        w.thread = threading.Thread(target=run, name="worker-" + namespace, daemon=True)
        w.thread.start()
        wait_for(lambda: w.worker_id or w.run_errors, 10, what="the worker to register")
        self.assertEqual(w.run_errors, [])

        def stop():
            w.stop()
            w.thread.join(15)
            self.assertFalse(w.thread.is_alive(), "the worker did not stop")

        self.addCleanup(stop)
        return w

    def register(self, template):
        self.server.register_workflow(template)

    def audit_reasons(self, task_id, step):
        return [(e.get("from"), e.get("to"), e.get("reason", ""), e.get("engine_id", ""), e.get("attempt"))
                for e in self.server.audit(task_id) if e.get("step") == step]
