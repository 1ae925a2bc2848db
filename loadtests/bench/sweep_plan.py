"""The order and the sizes of a client sweep's runs (`loadtests.bench.client_sweep`): which variant runs
when, at which levels, with how many prompts."""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["levels_of", "pairs", "plan", "rotated", "servers"]


def rotated(variants: list[str], k: int) -> list[str]:
    """The variants in the order of repeat k: the list turned left by k places."""
    j = k % len(variants) if variants else 0
    return variants[j:] + variants[:j]


def levels_of(items: list[str], variants: list[str], concurrency: list[int]) -> dict[str, list[int]]:
    """`--levels-of VARIANT=C,...` items as {variant: levels}; ValueError if not swept or not a level."""
    out: dict[str, list[int]] = {}
    for item in items:
        variant, _, cs = item.partition("=")
        try:
            levels = {int(c) for c in cs.split(",")}
        except ValueError:
            levels = set()  # none, or not numbers
        if variant not in variants or not levels or not levels <= set(concurrency):
            raise ValueError(f"--levels-of {item}: expected one of --variants = levels of --concurrency")
        out[variant] = sorted(levels)  # a list: results.json holds the settings
    return out


def plan(
    variants: list[str], concurrency: list[int], repeat: int, only: dict[str, list[int]]
) -> list[tuple[int, int, str]]:
    """(level, repeat, variant) in run order: level by level, repeat by repeat, the variants that run
    at that level (all of --concurrency's unless `only` names theirs) in repeat k's `rotated` order."""
    return [
        (c, k, v)
        for c in concurrency
        for k in range(repeat)
        for v in rotated([v for v in variants if c in only.get(v, [c])], k)
    ]


def servers(variants: list[str], app_variants: Collection[str]) -> list[list[str]]:
    """The variants grouped by the server they run on, in order: app variants that follow each other share
    one app start (switched by override), each other variant starts its own server."""
    out: list[list[str]] = []
    for v in variants:
        if v in app_variants and out and out[-1][0] in app_variants:
            out[-1].append(v)
        else:
            out.append([v])
    return out


def pairs(text: str) -> dict[int, int]:
    """`C=N,...` as {C: N}; ValueError when an item is not two numbers."""
    return {int(c): int(n) for c, _, n in (x.partition("=") for x in text.split(",") if x.strip())}
