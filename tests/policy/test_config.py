"""PolicyConfig rejects nonsense with a one-line reason (the deployments layer shows it to users)."""

from __future__ import annotations

import pytest

from policy.types import PolicyConfig


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"low": 32, "high": 32}, "low < high"),
        ({"low": -1}, "low < high"),
        ({"dwell_s": -1}, "dwell_s"),
        ({"persist_s": -0.5}, "persist_s"),
        ({"max_flips_per_tick": 0}, "max_flips_per_tick"),
        ({"min_on_replicas": -1}, "min_on_replicas"),
        ({"stale_after_s": 0}, "stale_after_s"),
        ({"ttl_s": 5, "stale_after_s": 5}, "ttl_s"),
        ({"goodput_margin": -0.1}, "goodput_margin"),
        ({"default_accept_length": 0.5}, "default_accept_length"),
        ({"batch_cap": 0}, "batch_cap"),
        ({"on_step_base_s": 0}, "priors"),
        ({"fit_decay": 0}, "fit_decay"),
        ({"high": float("nan")}, "finite"),
        ({"rule": "threshold"}, "Rule"),
    ],
)
def test_bad_config_raises_a_one_line_reason(fields: dict, says: str) -> None:
    with pytest.raises(ValueError, match=says) as err:
        PolicyConfig(**fields)
    assert "\n" not in str(err.value)


def test_defaults_are_valid_and_the_config_is_frozen_and_hashable() -> None:
    config = PolicyConfig()
    hash(config)
    with pytest.raises(AttributeError):
        config.high = 1  # type: ignore[misc]
