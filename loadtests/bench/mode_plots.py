"""The replicas' mode over a run, as the sweeps draw it: load (running + waiting) and ON/OFF per run
of the dynamic variant (`client_sweep`'s modes.png; `client_transition` draws its phases with
`draw_modes`)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

__all__ = ["draw_modes", "plot_modes"]


def draw_modes(ax: Any, rows: list[dict[str, Any]]) -> None:
    """On a matplotlib axis: the replicas' load (running + waiting, grey) and mode (red step, right
    axis) over the status rows' `t_rel`."""
    t = [float(r["t_rel"]) for r in rows]
    ax.plot(t, [int(r["running"]) + int(r["waiting"]) for r in rows], color="tab:gray", lw=1)
    ax.set_ylabel("running + waiting", fontsize=8)
    on = ax.twinx()
    on.step(t, [1 if r["mode"] == "on" else 0 for r in rows], where="post", color="tab:red", lw=1.5)
    on.set_ylim(-0.1, 1.1)
    on.set_yticks([0, 1], ["OFF", "ON"])


def plot_modes(status_csv: Path, png: Path) -> None:
    """The dynamic variant's runs side by side: per run, load (running + waiting) and the mode the
    replica ran over the run's time (from status.csv)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with status_csv.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r["variant"] == "dynamic"]
    runs = sorted({(int(r["concurrency"]), int(r["repeat"])) for r in rows}, key=lambda x: (x[1], x[0]))
    if not runs:
        return
    fig, axes = plt.subplots(1, len(runs), figsize=(3.2 * len(runs), 3.0), squeeze=False)
    for ax, (c, k) in zip(axes[0], runs, strict=True):
        draw_modes(ax, [r for r in rows if int(r["concurrency"]) == c and int(r["repeat"]) == k])
        ax.set_title(f"dynamic c={c} run {k}", fontsize=9)
        ax.set_xlabel("s into the run", fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
