"""Example remote worker: serves the handler "py.enrich" of namespace "demo".

    WEFT_SERVER=http://127.0.0.1:8080 WEFT_TOKEN=weft_... python3 example_worker.py

It reads the result of its dependency "prepare" ({"n": ...}), multiplies it by
the step's config "factor" (default 10) and returns {"n": ..., "by": "python"}.
It runs from a plain checkout (it puts the weft_worker package next to it on
sys.path) as well as with the package installed (pip install ./clients/python).
"""

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from weft_worker import Permanent, Worker  # noqa: E402

worker = Worker(os.environ.get("WEFT_SERVER", "http://127.0.0.1:8080"), token=os.environ.get("WEFT_TOKEN"),
                name="example", namespaces=os.environ.get("WEFT_NAMESPACES", "demo").split(","))


@worker.handler("py.enrich")
def enrich(step):
    dep = step.deps.get("prepare")
    if dep is None or "n" not in dep:
        raise Permanent("py.enrich needs a dependency named prepare with a result {\"n\": ...}")
    factor = (step.config or {}).get("factor", 10)
    return {"n": dep["n"] * factor, "by": "python", "attempt": step.attempt}


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    print("weft example worker: serving py.enrich", flush=True)
    worker.run()
