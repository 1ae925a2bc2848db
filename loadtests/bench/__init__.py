"""Benchmark drivers: each measures one thing and writes its section of docs/benchmarks.md (or its
results to a folder). Tooling: they import the product, nothing in serving imports them.

- `policy_tick`: `rules.decide` time over a 1000-replica fleet (`python -m loadtests.bench.policy_tick`);
- `policy_sim`: the fleet simulator's static vs dynamic comparison, docs/policy_sim.md and plots
  (`policy_sim_waves`: its lockstep section, a benchmark client's waves at a steady load);
- `off_cost`: an EAGLE-3 engine held OFF vs a plain engine on a GPU;
- `step_costs`: fits the goodput rule's step-time priors on this host and writes them into a config;
- `engine_arrivals`: plain vs specflip OFF/ON engines under closed-loop arrivals, in process (GPU or CPU);
- `client_sweep`: SGLang's own benchmark client over the app's on/off/dynamic and SGLang's servers;
- `client_transition`: low/high phases of fixed work (closed or open loop) for on/off/dynamic, goodput per phase;
- `recovery`: acceptance after a re-enable, per draft strategy (CPU);
- `accept_length`: a model pair's accept length on the real engine (`specflip models eval`);
- `serve_overhead`: the Ray Serve path against calling the engine directly (CPU);
- `worst_body`: the worst body under the default caps, alone and 16 at once, with normal load (CPU).

Each runs as `python -m loadtests.bench.<name>`; submodules are not imported here.
"""

__all__: list[str] = []
