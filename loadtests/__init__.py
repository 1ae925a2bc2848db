"""The tooling around the product: Locust users speaking the OpenAI streaming API, load shapes,
the sweep runner comparing always-on, always-off, dynamic and SGLang's adaptive speculation,
the benchmark drivers (`loadtests.bench`) and the `specflip demo` driver (`loadtests.demo`).
It imports the product (deployments, policy, patched_worker); the product never imports it.

Entry points: `loadtests/locustfile.py` (Locust), `python -m loadtests.sweep` (the sweep),
`python -m loadtests.report OUT_DIR` (rebuild the report), `python -m loadtests.bench.<name>`.
Locust and matplotlib come with the `bench` extra; `demo` needs neither. Submodules are not
imported here: `users`/`locustfile` pull in Locust and gevent's monkey patching, which only the
Locust process may have. See loadtests/README.md.
"""

__all__: list[str] = []
