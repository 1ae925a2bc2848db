"""SGLang's own server against the app, with the same engine arguments, client and host.

- `run`: the comparison (`python -m loadtests.rawvsapp`): one Locust run per target and mode steps
  through the levels; `report`: its results.json and report.md, goals and profiles;
- `raw_sglang`: `sglang.launch_server` with the engine arguments a specflip config gives its
  replicas (`python -m loadtests.rawvsapp.raw_sglang`);
- `referee`: the engine's own token count (SGLang's decode-batch log, the replicas' counters);
- `sglang_client`: SGLang's own benchmark client against the raw server, refereed by its log;
- `profiles`: the processes on each serving path, sampled together with py-spy.

`loadtests.bench.client_sweep` reuses `raw_sglang`, `referee` and `profiles`. Submodules are not
imported here.
"""

__all__: list[str] = []
