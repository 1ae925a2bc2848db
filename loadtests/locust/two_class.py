"""Locust entry point for a two-class run: interactive and batch users side by side.

    locust -f loadtests/locust/two_class.py --headless --host http://127.0.0.1:8000 \\
        --lt-shape fixed:users=8,duration=60 --lt-out-dir out/two-class ...

Everything else is loadtests/locust/locustfile.py's (settings, shape, records, summary). Users are
split by weight (`SPECFLIP_LT_INTERACTIVE_WEIGHT`, `SPECFLIP_LT_BATCH_WEIGHT`; 1 and 3 by
default); each sends its class as the `x-specflip-class` header, and every record carries the
class and the replica and mode the response headers named (`request_class`, `replica`, `mode`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run by path (locust -f): make `loadtests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from loadtests.locust import users  # the module, not the class: Locust runs every User class named here
from loadtests.locust.locustfile import ConfiguredShape  # noqa: F401 - the shape and the run's listeners

__all__ = ["BatchUser", "InteractiveUser"]


class InteractiveUser(users.OpenAIStreamUser):
    weight = int(os.environ.get("SPECFLIP_LT_INTERACTIVE_WEIGHT", "1"))
    request_class = "interactive"


class BatchUser(users.OpenAIStreamUser):
    weight = int(os.environ.get("SPECFLIP_LT_BATCH_WEIGHT", "3"))
    request_class = "batch"
