"""The far tail of the paired test's null p-values at small bands (docs/analysis.md, "Paired
test", outliers): simulated null comparisons decided by the real analysis
(``engine.analysis.paired_lift.paired_calls``: leave-one-out bands, the per-grading outlier
screen, the shrunk t), in groups of 2–4 comparisons per (problem, DSL, host), so each band is
the other 1–3 comparisons' series (4–12 dof at k = 3): the structure of the engine-level cell
CV 25 %, two hosts, k = 3. A valid test puts a share x of the p-values below x.

    .venv/bin/python benchmarks/paired_null_tail.py [--experiments 4000] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from engine.analysis.noise import Series
from engine.analysis.paired_lift import paired_calls
from storage.paired_repeats import PairedComparison, PairedGrading

THRESHOLDS = (0.001, 0.01, 0.05)


def experiment(
    rng: np.random.Generator, cv: float, pairs: int, groups: int, sizes: tuple[int, ...]
) -> list[float]:
    """One experiment's null p-values (end to end): ``groups`` (problem, DSL, host) keys of a
    size drawn from ``sizes``, every comparison null, log-normal gradings at ``cv``."""
    sigma = math.sqrt(math.log1p(cv * cv))
    comps: list[PairedComparison] = []
    series: list[Series] = []
    for g in range(groups):
        for j in range(int(rng.choice(sizes))):
            cid = len(comps) + 1
            arms = []
            for arm in ("baseline", "treatment"):
                values = [float(v) for v in 0.5 * np.exp(rng.normal(0, sigma, pairs))]
                key = f"pair:x:{cid}:{arm}"
                arms.append(
                    tuple(
                        PairedGrading(key, i, "d", "h", "h:s0", "pass", v, None)
                        for i, v in enumerate(values)
                    )
                )
                series.append(Series(f"p{g}", "h", tuple(values), key, "d"))
            comps.append(PairedComparison(cid, "m", f"p{g}", "x", j, arms[0], arms[1]))
    rows = paired_calls(comps, {"e2e": series, "span": []})
    return [p for r in rows if (p := r["clocks"]["e2e"]["p"]) is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiments", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cv", type=float, default=0.25)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    ps = np.array(
        [
            p
            for _ in range(args.experiments)
            for p in experiment(rng, args.cv, args.pairs, 4, (2, 3, 4))
        ]
    )
    below = {f"{x:g}": float(np.mean(ps < x)) for x in THRESHOLDS}
    ses = {f"{x:g}": math.sqrt(x * (1 - x) / len(ps)) for x in THRESHOLDS}
    print(json.dumps({"p_values": len(ps), "share_below": below, "binomial_se": ses}, indent=1))


if __name__ == "__main__":
    main()
