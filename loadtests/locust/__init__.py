"""The Locust load generator: users that speak the OpenAI streaming API and time every chunk.

- `locustfile`: Locust's entry (`locust -f loadtests/locust/locustfile.py`), the `--lt-*` options,
  one shape class driven by `--lt-shape`; `two_class`: the same with interactive and batch users;
- `users`: the `FastHttpUser`; `sse`: the byte-level SSE decoder; `records`: one JSONL record per
  request (TTFT, TPOT, ITL, tokens);
- `shapes`: shape specs -> schedules of phases, Poisson pacing; `prompts`, `payloads`: request bodies;
  `config`: one run's settings; `hosts`: URLs bound to the configured host;
- `run`: Locust as a subprocess, its records tailed while it runs (what the sweep, `rawvsapp` and
  `calibrate` call);
- `two_class_report`: per-class results of two-class runs (`python -m loadtests.locust.two_class_report`).

Submodules are not imported here: `users` and `locustfile` pull in Locust and gevent's monkey
patching, which only the Locust process may have.
"""

__all__: list[str] = []
