"""PolicyConfig rejects nonsense naming the field: the bounds are the fields' own (the app config's
`policy` section is the same class, deployments.config.PolicySection, and shows the first error in
one line)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from policy.types import PolicyConfig, PolicySettings, Rule


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"low": 32, "high": 32}, "low < high"),
        ({"low": -1}, "low < high"),
        ({"dwell_s": -1}, "dwell_s\n.*greater than or equal to 0"),
        ({"persist_s": -0.5}, "persist_s\n.*greater than or equal to 0"),
        ({"max_flips_per_tick": 0}, "max_flips_per_tick\n.*greater than or equal to 1"),
        ({"min_on_replicas": -1}, "min_on_replicas\n.*greater than or equal to 0"),
        ({"stale_after_s": 0}, "stale_after_s\n.*greater than 0"),
        ({"ttl_s": 5, "stale_after_s": 5}, "ttl_s \\(5.0\\) must exceed stale_after_s"),
        ({"goodput_margin": -0.1}, "goodput_margin\n"),
        ({"default_accept_length": 0.5}, "default_accept_length\n.*greater than or equal to 1"),
        ({"batch_cap": 0}, "batch_cap\n"),
        ({"on_step_base_s": 0}, "on_step_base_s\n.*greater than 0"),
        ({"off_step_per_req_s": -1e-3}, "off_step_per_req_s\n"),
        ({"fit_decay": 0}, "fit_decay\n"),
        ({"fit_decay": 1.5}, "fit_decay\n.*less than or equal to 1"),
        ({"tick_s": 61}, "tick_s\n.*less than or equal to 60"),
        ({"mixed_on_fill": 0}, "mixed_on_fill\n"),
        ({"high": float("nan")}, "high\n.*finite"),
        ({"rule": "sometimes"}, "rule\n.*'threshold'"),
        ({"load_metric": "queue"}, "load_metric\n"),
        ({"hgih": 3}, "hgih\n.*Extra inputs are not permitted"),
    ],
)
def test_bad_config_raises_naming_the_field(fields: dict, says: str) -> None:
    with pytest.raises(ValidationError, match=says) as err:
        PolicyConfig(**fields)
    assert err.value.error_count() == 1


def test_defaults_are_valid_and_the_config_is_frozen_and_hashable() -> None:
    config = PolicyConfig()
    hash(config)
    with pytest.raises(ValidationError, match="frozen"):
        config.high = 1  # type: ignore[misc]


def test_replace_validates_like_the_constructor() -> None:
    config = PolicyConfig(high=40)
    assert config.replace(low=20) == PolicyConfig(high=40, low=20)
    assert config.replace(rule="goodput").rule is Rule.GOODPUT
    with pytest.raises(ValidationError, match="low < high"):
        config.replace(low=40)


def test_the_app_section_is_the_policy_settings_plus_its_own_keys() -> None:
    """Every policy setting is declared once: the app's section inherits the fields, bounds and
    descriptions; PolicyConfig adds only what the app sets and the fit's internals."""
    from deployments.config import PolicySection

    settings = set(PolicySettings.model_fields)
    assert set(PolicySection.model_fields) == settings | {"enabled", "actor_name"}
    assert set(PolicyConfig.model_fields) == settings | {"batch_cap", "prior_weight", "fit_decay"}
    assert all(PolicySettings.model_fields[name].description for name in settings)
    assert PolicySection.model_fields["dwell_s"].metadata == PolicySettings.model_fields["dwell_s"].metadata
    with pytest.raises(ValidationError, match="dwell_s"):
        PolicySection(dwell_s=-1)
