"""Seeded synthetic outcome sets of any size (paper scale: 6 models × 74 problems × 4 arms)."""

from __future__ import annotations

import random

from engine.analysis.outcomes import OutcomeSet, ScoredAttempt

FAMILIES = ("Attention", "KV Cache", "MLP & Norm", "MoE", "Quantization", "Linear Attention")


def synthetic(models: int = 6, problems: int = 74, replicates: int = 1,
              seed: int = 0) -> OutcomeSet:
    rng = random.Random(seed)
    rows: list[ScoredAttempt] = []
    for m in range(models):
        for p in range(problems):
            family = FAMILIES[p % len(FAMILIES)]
            for rep in range(1, replicates + 1):
                for arm in ("solo", "skill"):
                    for dsl in ("cute", "tirx"):
                        passed = rng.random() < 0.75
                        runtime = 10 ** rng.uniform(-2, 1) if passed else None
                        rows.append(ScoredAttempt(
                            model=f"model-{m}", problem=f"p{p + 1:02d}", family=family,
                            dsl=dsl, arm=arm, replicate=rep, passed=passed, runtime_ms=runtime,
                            ref_runtime_ms=10 ** rng.uniform(-1, 1),
                            skill_blank=arm == "solo" and rng.random() < 0.05,
                            tokens=rng.randint(10_000, 200_000),
                        ))
    return OutcomeSet(rows)
