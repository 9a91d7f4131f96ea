"""Full analysis of a paper-scale outcome set (6 models × 74 problems × 4 arms = 1,776
attempts) with 20,000 sign-flip permutation draws, 2,000 swap draws and 2,000 bootstrap draws.

    .venv/bin/python benchmarks/analysis_full.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from engine.analysis.report import AnalysisOptions, analyze
from engine.analysis.synthetic import synthetic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    outcomes = synthetic(models=6, problems=74, replicates=1, seed=7)
    analyze(outcomes, AnalysisOptions(permutation_draws=100))  # warm imports
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        report = analyze(outcomes, AnalysisOptions(permutation_draws=20_000))
        times.append(time.perf_counter() - start)
    print(json.dumps({
        "attempts": len(outcomes.rows),
        "comparisons": len(report["comparisons"]),
        "permutation_draws": 20_000,
        "median_seconds": round(statistics.median(times), 3),
        "min_seconds": round(min(times), 3),
    }, indent=2))


if __name__ == "__main__":
    main()
