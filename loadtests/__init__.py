"""Load tests for specflip: Locust users speaking the OpenAI streaming API, load shapes,
and the sweep runner comparing always-on, always-off, dynamic and SGLang's adaptive speculation.

Entry points: `loadtests/locustfile.py` (Locust), `python -m loadtests.sweep` (the sweep),
`python -m loadtests.report OUT_DIR` (rebuild the report). Submodules are not imported here:
`users`/`locustfile` pull in Locust and gevent's monkey patching, which only the Locust
process may have. See loadtests/README.md.
"""

__all__: list[str] = []
