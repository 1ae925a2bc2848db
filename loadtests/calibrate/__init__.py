"""How much load a client can take in on this host: its ceiling in token chunks per second.

- `run`: Locust (and other clients) against the null server at rising concurrency, who was
  CPU-bound, and `load_ceiling`, which the sweep and `rawvsapp` read to flag client-bound points
  (`python -m loadtests.calibrate`);
- `nullserver`: a null OpenAI server, chunks of the real shape at an engine-like step and no model
  (`python -m loadtests.calibrate.nullserver`).

Submodules are not imported here.
"""

__all__: list[str] = []
