"""Headless PNG figures like the paper's (matplotlib, Agg backend)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_figures(report: dict[str, Any], directory: str | Path) -> list[Path]:
    """Lift by model × direction, help/harm by standing, per-problem lift, solo speedups."""
    plt = _plt()
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    suffix = " (PREVIEW)" if report.get("preview") else ""
    written: list[Path] = []

    def save(fig: Any, name: str) -> None:
        path = out / name
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)
        written.append(path)

    overall = [r for r in report["lift"] if r["family"] == "all"]
    models = sorted({r["model"] for r in overall})
    fig, ax = plt.subplots(figsize=(max(4, 1.4 * len(models) + 2), 3.5))
    width = 0.38
    for k, direction in enumerate(("cute->tirx", "tirx->cute")):
        values = [next((100 * (r["delta_gm"] or 0) for r in overall
                        if r["model"] == m and r["direction"] == direction), 0.0) for m in models]
        ax.bar([i + (k - 0.5) * width for i in range(len(models))], values, width,
               label=direction)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(models)), models, rotation=20, ha="right")
    ax.set_ylabel("paired lift ΔGM (%)")
    ax.set_title("Lift by model and direction" + suffix)
    ax.legend()
    save(fig, "lift_by_model.png")

    standing = [r for r in report["tiers"]["by_standing"] if r["model"] == "all"]
    fig, ax = plt.subplots(figsize=(5, 3.5))
    names = [r["standing"] for r in standing]
    ax.bar([i - 0.2 for i in range(len(names))],
           [100 * (r["help_rate"] or 0) for r in standing], 0.4, label="helped")
    ax.bar([i + 0.2 for i in range(len(names))],
           [100 * (r["harm_rate"] or 0) for r in standing], 0.4, label="harmed")
    ax.set_xticks(range(len(names)), [f"source {n}\n(n={r['n']})" for n, r in
                                      zip(names, standing)])
    ax.set_ylabel("share of comparisons (%)")
    ax.set_title("Help and harm by source standing" + suffix)
    ax.legend()
    save(fig, "help_harm_by_standing.png")

    comps = report["comparisons"]
    fig, ax = plt.subplots(figsize=(max(5, 0.25 * len(comps) + 2), 3.5))
    values = [math.log2(c["rho"]) for c in comps]
    colors = ["tab:green" if v > 0 else "tab:red" if v < 0 else "tab:gray" for v in values]
    ax.bar(range(len(values)), values, color=colors)
    ax.set_xticks(range(len(values)), [f"{c['problem']} {c['direction'][:1]}" for c in comps],
                  rotation=90, fontsize=6)
    ax.set_ylabel("log2 ρ")
    ax.set_title("Per-comparison paired ratio" + suffix)
    save(fig, "per_problem_lift.png")

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for s in report["solo"]:
        ax.scatter([s["pass_rate"] * 100], [s["gm"] or 0], label=f"{s['model']} {s['dsl']}")
    ax.set_xlabel("solo pass rate P (%)")
    ax.set_ylabel("passing-only GM speedup (×)")
    ax.set_title("Solo outcomes" + suffix)
    if report["solo"]:
        ax.legend(fontsize=6)
    save(fig, "solo_speedups.png")
    return written
