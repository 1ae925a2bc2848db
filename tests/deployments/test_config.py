"""The app config: YAML in, one-line errors out, and a faithful mapping onto the policy's PolicyConfig."""

from __future__ import annotations

from pathlib import Path

import pytest

from deployments.config import ConfigError, Device, SpecFlipConfig, load_config
from policy.rules import decide
from policy.state import PolicyState, with_override
from policy.types import LoadMetric, Observation, Override, PolicyConfig, Rule, SpecMode

MIN = {"model": {"path": "/models/target"}}


def test_policy_defaults_are_the_policy_packages_defaults() -> None:
    mapped = SpecFlipConfig.parse(MIN).policy.to_policy_config()
    assert mapped == PolicyConfig()


def test_every_policy_setting_reaches_the_policy_config() -> None:
    policy = {
        "rule": "goodput",
        "load_metric": "waiting",
        "high": 9,
        "low": 2,
        "dwell_s": 3,
        "persist_s": 0.75,
        "goodput_margin": 0.2,
        "default_accept_length": 3.1,
        "max_flips_per_tick": 2,
        "min_on_replicas": 1,
        "stale_after_s": 4,
        "tick_s": 0.3,
        "ttl_s": 40,
        "on_step_base_s": 0.006,
        "on_step_per_req_s": 1.2e-4,
        "off_step_base_s": 0.0048,
        "off_step_per_req_s": 2.2e-5,
    }
    config = SpecFlipConfig.parse({**MIN, "policy": policy, "engine": {"max_running_requests": 64}})
    pc = config.policy_config()
    assert (pc.rule, pc.load_metric, pc.batch_cap) == (Rule.GOODPUT, LoadMetric.WAITING, 64)
    plain = {k: v for k, v in policy.items() if k not in ("rule", "load_metric")}
    assert {k: getattr(pc, k) for k in plain} == plain


def test_disabled_policy_never_flips_but_overrides_still_apply() -> None:
    pc = SpecFlipConfig.parse({**MIN, "policy": {"enabled": False, "dwell_s": 0}}).policy_config()
    hot = Observation("r", running=500, waiting=500, mode=SpecMode.ON, patched=True, accept_length=1.0)
    idle_off = Observation("s", running=0, waiting=0, mode=SpecMode.OFF, patched=True, accept_length=4.0)
    state = PolicyState()
    for now in range(1, 30):  # many ticks at extreme loads both ways: nothing moves
        actions, state = decide([hot, idle_off], state, pc, float(now))
        assert actions == ()
    actions, state = decide([hot, idle_off], with_override(state, "s", Override.FORCE_ON), pc, 31.0)
    assert [(a.replica_id, a.enabled) for a in actions] == [("s", True)]


def test_tree_shaped_speculation_as_measured_on_the_h200_is_valid() -> None:
    spec = SpecFlipConfig.parse(
        {**MIN, "speculation": {"steps": 2, "topk": 4, "draft_tokens": 16}}
    ).speculation
    assert (spec.steps, spec.topk, spec.draft_tokens) == (2, 4, 16)


def test_yaml_file_loads_and_enums_parse(tmp_path: Path) -> None:
    path = tmp_path / "specflip.yaml"
    path.write_text(
        "model: {id: m, path: /t, draft_path: /d}\n"
        "speculation: {steps: 2, topk: 1, draft_tokens: 3, strategy: full_extend}\n"
        "engine: {device: cpu}\nreplicas: {count: 3, num_gpus: 0}\nserve: {route_prefix: /api, port: 9000}\n"
    )
    config = load_config(str(path))
    assert config.engine.device is Device.CPU and config.replicas.count == 3 and config.speculative
    assert config.speculation.switch_config().strategy.value == "full_extend"


BAD = [
    ({"model": {}}, "model.path: Field required"),
    ({**MIN, "policy": {"high": 3, "low": 5}}, "policy: need 0 <= low < high, got low=5.0 high=3.0"),
    ({**MIN, "policy": {"load_metric": "queue"}}, "policy.load_metric"),
    (
        {**MIN, "policy": {"ttl_s": 1, "stale_after_s": 5}},
        "policy: ttl_s (1.0) must exceed stale_after_s (5.0)",
    ),
    (
        {**MIN, "policy": {"max_flips_per_tick": 0}},
        "policy.max_flips_per_tick: Input should be greater than or equal to 1",
    ),
    ({**MIN, "policy": {"dwell_s": float("inf")}}, "policy.dwell_s: Input should be a finite number"),
    ({**MIN, "routing": {"per_rank": 0}}, "routing.per_rank: Input should be greater than or equal to 1"),
    (
        {**MIN, "routing": {"class_header": ""}},
        "routing.class_header: String should have at least 1 character",
    ),
    (
        {**MIN, "routing": {"default_class": "urgent"}},
        "routing.default_class: Input should be 'interactive' or 'batch'",
    ),
    ({**MIN, "speculation": {"steps": 3, "topk": 1, "draft_tokens": 8}}, "with topk=1, draft_tokens must be"),
    (
        {**MIN, "speculation": {"steps": 2, "topk": 4, "draft_tokens": 22}},
        "exceeds the draft tree of steps=2, topk=4",
    ),
    ({**MIN, "replicas": {"num_gpus": 0}}, "engine.device is cuda but replicas.num_gpus is 0"),
    ({**MIN, "replicas": {"count": 1}, "policy": {"min_on_replicas": 2}}, "min_on_replicas (2) exceeds"),
    ({**MIN, "serve": {"route_prefix": "api"}}, "serve.route_prefix"),
    ({**MIN, "surprise": 1}, "surprise: Extra inputs are not permitted"),
    ({**MIN, "engine": {"device": "tpu"}}, "engine.device"),
]


@pytest.mark.parametrize(("data", "expected"), BAD, ids=[b[1][:40] for b in BAD])
def test_bad_config_fails_with_one_line_saying_where(data: dict, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        SpecFlipConfig.parse(data)
    message = str(err.value)
    assert "\n" not in message and expected in message, message


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("model: [1, 2\n", "not valid YAML"),
        ("- a\n- b\n", "expected a mapping"),
        ("model: {path: 3}\n", "model.path"),
    ],
)
def test_bad_yaml_fails_with_one_line(tmp_path: Path, text: str, expected: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_config(str(path))
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(str(tmp_path / "missing.yaml"))


def test_every_field_has_a_description() -> None:
    def walk(model: type) -> list[str]:
        missing = []
        for name, field in model.model_fields.items():  # type: ignore[attr-defined]
            if not field.description:
                missing.append(f"{model.__name__}.{name}")
            sub = field.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields"):
                missing += walk(sub)
        return missing

    assert walk(SpecFlipConfig) == []


def test_config_is_frozen() -> None:
    config = SpecFlipConfig.parse(MIN)
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its ValidationError subclass
        config.replicas.count = 5  # type: ignore[misc]
