"""The sweep: speculation always ON, always OFF, specflip's `dynamic` policy and SGLang's
`speculative_adaptive` side by side, each over a concurrency sweep and a low -> high -> low load.

- `run`: the CLI and loop (`python -m loadtests.sweep`, `specflip bench`), one Locust run per point;
- `launcher`: the variants and how their app comes up (`ExternalApp`, `CommandLauncher`), also used
  by `rawvsapp` and `loadtests.bench.client_sweep`;
- `control`: typed `/specflip/status` samples and the background status poller;
- `results`, `plots`, `report`: CSV/JSON, PNG plots and report.md (`python -m loadtests.sweep.report`);
- `h200_sweep.sh`: the GPU sweep of docs/benchmarks.md.

Submodules are not imported here (the plots need matplotlib, the `bench` extra).
"""

__all__: list[str] = []
