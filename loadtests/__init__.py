"""The tooling around the product, one folder per tool:

- `locust/`: the Locust load generator (users speaking the OpenAI streaming API, shapes, records);
- `sweep/`: always-on, always-off, dynamic and SGLang's adaptive speculation side by side;
- `rawvsapp/`: SGLang's own server against the app, same engine arguments, client and host;
- `calibrate/`: a client's ceiling on this host, against the null server;
- `bench/`: benchmark drivers, each writing its section of docs/benchmarks.md;
- `sim/`: the fleet simulator; `models/`: the tiny model pair and the 8B shapes;
- `demo/`: the `specflip demo` driver; `commands`: the CLI's tooling subcommands.

Shared by several tools: `metrics` (percentiles, windows, goodput), `markdown` (tables and the
sections of docs/benchmarks.md) and `servers` (server process groups and their CPU use).
It imports the product (deployments, policy, patched_worker); the product never imports it.
Locust and matplotlib come with the `bench` extra; `demo` needs neither. Submodules are not
imported here: `locust.users`/`locust.locustfile` pull in Locust and gevent's monkey patching,
which only the Locust process may have. See loadtests/README.md.
"""

__all__: list[str] = []
