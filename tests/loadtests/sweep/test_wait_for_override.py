"""`wait_for_override` against scripted status documents: for on/off it waits on the engines' own
`enabled` flag (not the replica's `mode`, which an idle engine reports as the requested mode at
once), sending short requests until the engines have flipped."""

from __future__ import annotations

import time
from typing import Any, cast

import httpx
import pytest

from deployments.client import ControlError, SpecflipClient
from loadtests.sweep.launcher import wait_for_override

MODEL = "tiny"


class ScriptedApp:
    """Status documents of two idle replicas held at `override`: each reports `mode` = the override at
    once (the requested mode of an idle engine), while its engine's `enabled` changes only after
    `steps_to_flip` short requests (None: never). Records the requests sent."""

    def __init__(self, override: str, steps_to_flip: int | None, engine: str = "full") -> None:
        self.override, self.steps_to_flip, self.engine = override, steps_to_flip, engine
        self.probes: list[tuple[str, str]] = []
        self.fail_probe: Exception | None = None
        self.served: list[str] = [MODEL, "other"]
        self.models_asked = 0

    def _replica(self, rid: str) -> dict[str, Any]:
        flipped = self.steps_to_flip is not None and len(self.probes) >= self.steps_to_flip
        enabled = (self.override == "on") if flipped else (self.override != "on")
        doc: dict[str, Any] = {"replica_id": rid, "override": self.override, "mode": self.override}
        if self.engine == "full":
            doc["engine"] = {"enabled": enabled, "requested": self.override == "on"}
        elif self.engine == "older":  # an app from before the engine object had enabled/requested
            doc["engine"] = {"toggles": 3, "accept_length": 2.0}
        return doc

    def status(self) -> dict[str, Any]:
        return {"replicas": [self._replica("r0"), self._replica("r1")], "expected_replicas": 2}

    def replicas(self) -> list[dict[str, Any]]:
        return self.status()["replicas"]

    def models(self) -> list[str]:
        self.models_asked += 1
        return list(self.served)

    def probe(self, model: str, api: str = "chat", timeout: float = 300.0) -> None:
        if self.fail_probe is not None:
            raise self.fail_probe
        self.probes.append((model, api))


def _wait(app: ScriptedApp, mode: str, **kwargs: Any) -> list[str]:
    logs: list[str] = []
    wait_for_override(cast(SpecflipClient, app), mode, log=logs.append, **kwargs)
    return logs


@pytest.mark.parametrize("mode", ["off", "on"])
def test_waits_for_the_engines_enabled_flag_sending_short_requests(mode: str) -> None:
    app = ScriptedApp(mode, steps_to_flip=3)
    # the replicas' mode says the held mode already; their engines still run the other one
    assert {r["mode"] for r in app.replicas()} == {mode}
    assert {r["engine"]["enabled"] for r in app.replicas()} == {mode != "on"}
    assert _wait(app, mode, timeout=5, flip_timeout=5) == []
    assert app.probes == [(MODEL, "completions")] * 3  # the first served model, until flipped
    assert app.models_asked == 1
    assert {r["engine"]["enabled"] for r in app.replicas()} == {mode == "on"}


def test_an_app_serving_no_model_is_asked_for_its_models_once_and_waited_out() -> None:
    app = ScriptedApp("on", steps_to_flip=None)
    app.served = []
    logs = _wait(app, "on", timeout=0.2, flip_timeout=0.5)
    assert app.probes == [] and app.models_asked == 1
    assert logs == [
        "[launch] note: override=on set, engines not flipped (enabled: r0:False r1:False); going ahead"
    ]


def test_engines_already_in_the_mode_get_no_request() -> None:
    app = ScriptedApp("off", steps_to_flip=0)
    assert _wait(app, "off") == [] and app.probes == []


def test_engines_that_do_not_flip_in_time_leave_a_line_not_an_error() -> None:
    app = ScriptedApp("off", steps_to_flip=None)
    t0 = time.monotonic()
    logs = _wait(app, "off", timeout=0.3, flip_timeout=0.5)
    assert time.monotonic() - t0 < 5
    assert len(app.probes) >= 2
    assert logs == [
        "[launch] note: override=off set, engines not flipped (enabled: r0:True r1:True); going ahead"
    ]


@pytest.mark.parametrize(
    "error", [ControlError("probe request failed: HTTP 503"), httpx.ConnectError("refused")]
)
def test_a_failed_request_ends_the_wait_with_a_line(error: Exception) -> None:
    app = ScriptedApp("on", steps_to_flip=1)
    app.fail_probe = error
    logs = _wait(app, "on", timeout=5, flip_timeout=5)
    assert logs == [f"[launch] note: override=on set, a request to flip the engines failed: {error}"]


def test_auto_waits_for_the_override_only() -> None:
    app = ScriptedApp("auto", steps_to_flip=None)
    assert _wait(app, "auto") == [] and app.probes == []


@pytest.mark.parametrize("engine", ["none", "older"])
def test_replicas_without_the_engines_enabled_flag_go_by_their_mode(engine: str) -> None:
    app = ScriptedApp("off", steps_to_flip=None, engine=engine)
    started = time.monotonic()
    assert _wait(app, "off", timeout=5, flip_timeout=5) == [] and app.probes == []
    assert time.monotonic() - started < 2.0  # not the whole timeout waited out


def test_an_override_not_taken_is_an_error() -> None:
    app = ScriptedApp("auto", steps_to_flip=None)
    with pytest.raises(ControlError, match="did not take override=off"):
        _wait(app, "off", timeout=0.3)
