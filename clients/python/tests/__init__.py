import logging

# The worker's warnings during the tests are collected per test (base.py), not printed.
logging.getLogger("weft_worker").addHandler(logging.NullHandler())
