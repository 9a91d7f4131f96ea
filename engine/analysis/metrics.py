"""Solo metrics, paired comparisons, lift, tiers and the rate ladder (pure functions)."""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from engine.analysis.outcomes import DIRECTIONS, ScoredAttempt
from engine.analysis.paired import TIER_NAMES, ArmResult, rho, tier, verdict

LADDER = (0.0, 0.5, 1.0, 2.0, 4.0)
STANDINGS = ("below", "at", "above")


def _arm(o: ScoredAttempt | None) -> ArmResult | None:
    return None if o is None else ArmResult(o.passed, o.runtime_ms, o.ref_runtime_ms)


def apply_exclusion(
    rows: Iterable[ScoredAttempt], fail_flags: Sequence[str]
) -> list[ScoredAttempt]:
    """Score attempts carrying any of ``fail_flags`` as non-passing (e.g. a static check)."""
    bad = set(fail_flags)
    if not bad:
        return list(rows)
    return [replace(r, passed=False) if bad & set(r.flags) else r for r in rows]


# -- solo ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SoloMetrics:
    model: str
    dsl: str
    n: int
    passed: int
    pass_rate: float
    gm: float | None
    r2: float
    pct_sol_median: float | None = None  # passing attempts with a known SOL


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _summarise(model: str, dsl: str, items: Sequence[ScoredAttempt]) -> SoloMetrics:
    """Pass rate, GM speedup of passing attempts, R(2) and median %SOL of one group."""
    speeds = [s for s in (r.speedup for r in items) if s is not None]
    passing = sum(r.passed for r in items)
    sol_shares = [p for p in (r.pct_of_sol for r in items) if p is not None]
    return SoloMetrics(
        model,
        dsl,
        len(items),
        passing,
        passing / len(items),
        geomean(speeds),
        sum(1 for s in speeds if s >= 2.0) / len(items),
        statistics.median(sol_shares) if sol_shares else None,
    )


def solo_metrics(rows: Iterable[ScoredAttempt]) -> list[SoloMetrics]:
    groups: dict[tuple[str, str], list[ScoredAttempt]] = defaultdict(list)
    for r in rows:
        if r.arm == "solo":
            groups[(r.model, r.dsl)].append(r)
    return [_summarise(model, dsl, items) for (model, dsl), items in sorted(groups.items())]


def arm_metrics(rows: Iterable[ScoredAttempt]) -> list[dict[str, object]]:
    """Pass rate and speedups per model × arm (solo, skill) × DSL (the target, for skill)."""
    groups: dict[tuple[str, str, str], list[ScoredAttempt]] = defaultdict(list)
    for r in rows:
        groups[(r.model, r.arm, r.dsl)].append(r)
    out: list[dict[str, object]] = []
    for (model, arm, dsl), items in sorted(groups.items()):
        s = _summarise(model, dsl, items)
        out.append(
            {
                "model": model,
                "arm": arm,
                "dsl": dsl,
                "n": s.n,
                "passed": s.passed,
                "pass_rate": s.pass_rate,
                "gm": s.gm,
                "r2": s.r2,
                "pct_sol_median": s.pct_sol_median,
            }
        )
    return out


# -- comparisons -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Comparison:
    model: str
    problem: str
    family: str
    direction: str
    replicate: int
    source: ScoredAttempt
    baseline: ScoredAttempt
    treatment: ScoredAttempt | None  # None: skipped (blank or missing source skill)
    rho: float

    @property
    def skipped(self) -> bool:
        return self.treatment is None

    @property
    def verdict(self) -> str:
        return verdict(self.rho)

    @property
    def log_rho(self) -> float:
        return math.log(self.rho)

    @property
    def solo_tier(self) -> int:
        return tier(ArmResult(self.baseline.passed, self.baseline.runtime_ms,
                              self.baseline.ref_runtime_ms))

    @property
    def source_tier(self) -> int:
        return tier(ArmResult(self.source.passed, self.source.runtime_ms,
                              self.source.ref_runtime_ms))

    @property
    def standing(self) -> str:
        """The source's tier relative to the target solo's: below, at or above."""
        d = self.source_tier - self.solo_tier
        return "below" if d < 0 else "above" if d > 0 else "at"


Arms = tuple[str, str, int, str, ScoredAttempt, ScoredAttempt, ScoredAttempt | None]


def resolved_arms(rows: Iterable[ScoredAttempt]) -> list[Arms]:
    """(model, problem, replicate, direction, source, baseline, treatment) of every resolved
    comparison: source and baseline present, treatment present or skipped (None)."""
    index: dict[tuple[str, str, int, str, str], ScoredAttempt] = {}
    for r in rows:
        index[(r.model, r.problem, r.replicate, r.arm, r.dsl)] = r
    out: list[Arms] = []
    keys = sorted({(m, p, rep) for (m, p, rep, _, _) in index})
    for model, problem, rep in keys:
        for direction in DIRECTIONS:
            src_dsl, tgt_dsl = direction.split("->")
            source = index.get((model, problem, rep, "solo", src_dsl))
            baseline = index.get((model, problem, rep, "solo", tgt_dsl))
            treatment = index.get((model, problem, rep, "skill", tgt_dsl))
            if source is None or baseline is None:
                continue
            if source.skill_blank:
                treatment = None
            elif treatment is None:
                continue  # not resolved yet
            out.append((model, problem, rep, direction, source, baseline, treatment))
    return out


def comparisons(rows: Iterable[ScoredAttempt]) -> list[Comparison]:
    """Every resolved comparison: source and baseline present, treatment present or skipped;
    one with a passing arm that has no finite positive runtime is no result and left out
    (``outcomes.from_store`` counts such rows; an outcomes file cannot hold them)."""
    out: list[Comparison] = []
    for model, problem, rep, direction, source, baseline, treatment in resolved_arms(rows):
        arms = [a for a in (_arm(baseline), _arm(treatment)) if a is not None]
        if any(a.passed and not a.timed for a in arms):
            continue
        value = rho(_arm(baseline), _arm(treatment))  # type: ignore[arg-type]
        out.append(Comparison(model, problem, baseline.family, direction, rep, source,
                              baseline, treatment, value))
    return out


@dataclass(frozen=True)
class Lift:
    n: int
    delta_gm: float | None
    help_rate: float | None
    harm_rate: float | None

    @property
    def neutral_rate(self) -> float | None:
        if self.help_rate is None or self.harm_rate is None:
            return None
        return 1.0 - self.help_rate - self.harm_rate


def lift(group: Sequence[Comparison]) -> Lift:
    """ΔGM = exp(mean log ρ) − 1, help T = share ρ > 1, harm H = share ρ < 1."""
    n = len(group)
    if n == 0:
        return Lift(0, None, None, None)
    mean_log = sum(c.log_rho for c in group) / n
    return Lift(
        n,
        math.exp(mean_log) - 1.0,
        sum(c.rho > 1.0 for c in group) / n,
        sum(c.rho < 1.0 for c in group) / n,
    )


def group_by(
    comps: Iterable[Comparison], key: Callable[[Comparison], tuple[object, ...]]
) -> dict[tuple[object, ...], list[Comparison]]:
    groups: dict[tuple[object, ...], list[Comparison]] = defaultdict(list)
    for c in comps:
        groups[key(c)].append(c)
    return dict(sorted(groups.items(), key=lambda kv: tuple(str(k) for k in kv[0])))


def lift_table(
    comps: Sequence[Comparison],
    extra: Callable[[Sequence[Comparison]], dict[str, object]] | None = None,
) -> list[dict[str, object]]:
    """Lift by model × direction over all problems and within each family.

    ``n`` counts paired comparisons (problem × replicate), ``problems`` distinct problems;
    ``extra`` adds columns computed from each cell's comparisons (e.g. an interval).
    """
    out: list[dict[str, object]] = []
    for (model, direction), group in group_by(comps, lambda c: (c.model, c.direction)).items():
        cells = [("all", group)] + [
            (str(fam[0]), g) for fam, g in group_by(group, lambda c: (c.family,)).items()
        ]
        for family, g in cells:
            lf = lift(g)
            out.append(
                {
                    "model": model,
                    "direction": direction,
                    "family": family,
                    "n": lf.n,
                    "delta_gm": lf.delta_gm,
                    "help_rate": lf.help_rate,
                    "harm_rate": lf.harm_rate,
                    "problems": len({c.problem for c in g}),
                    **(extra(g) if extra else {}),
                }
            )
    return out


def leave_best_family_out(comps: Sequence[Comparison]) -> list[dict[str, object]]:
    """Per model × direction: the lift without the family whose own lift is highest."""
    out: list[dict[str, object]] = []
    for (model, direction), group in group_by(comps, lambda c: (c.model, c.direction)).items():
        fams = group_by(group, lambda c: (c.family,))
        if len(fams) < 2:
            continue
        best = max(fams, key=lambda f: lift(fams[f]).delta_gm or -math.inf)[0]
        rest = [c for c in group if c.family != best]
        out.append({"model": model, "direction": direction, "excluded_family": best,
                    "delta_gm_all": lift(group).delta_gm, "delta_gm_without": lift(rest).delta_gm,
                    "n": len(rest)})
    return out


# -- tiers -----------------------------------------------------------------------------------
def tier_tables(comps: Sequence[Comparison]) -> dict[str, list[dict[str, object]]]:
    by_standing: list[dict[str, object]] = []
    for model_key, group in list(group_by(comps, lambda c: (c.model,)).items()) + [
        (("all",), list(comps))
    ]:
        for standing in STANDINGS:
            g = [c for c in group if c.standing == standing]
            lf = lift(g)
            by_standing.append({"model": model_key[0], "standing": standing, "n": lf.n,
                                "help_rate": lf.help_rate, "harm_rate": lf.harm_rate,
                                "delta_gm": lf.delta_gm})
    by_tiers: list[dict[str, object]] = []
    for solo_t in range(3):
        for source_t in range(3):
            g = [c for c in comps if c.solo_tier == solo_t and c.source_tier == source_t]
            lf = lift(g)
            by_tiers.append({"solo_tier": TIER_NAMES[solo_t], "source_tier": TIER_NAMES[source_t],
                             "n": lf.n, "delta_gm": lf.delta_gm, "help_rate": lf.help_rate,
                             "harm_rate": lf.harm_rate})
    return {"by_standing": by_standing, "by_solo_and_source_tier": by_tiers,
            "reverse_given_helped": reverse_given_helped(comps)}


def reverse_given_helped(comps: Sequence[Comparison]) -> list[dict[str, object]]:
    """For helped comparisons, how the reverse direction on the same model/problem fared."""
    index = {(c.model, c.problem, c.replicate, c.direction): c for c in comps}
    rows: list[dict[str, object]] = []
    helped = [c for c in comps if c.rho > 1.0]
    for model_key, group in list(group_by(helped, lambda c: (c.model,)).items()) + [
        (("all",), helped)
    ]:
        reverse = []
        for c in group:
            other = "tirx->cute" if c.direction == "cute->tirx" else "cute->tirx"
            r = index.get((c.model, c.problem, c.replicate, other))
            if r is not None:
                reverse.append(r)
        n = len(reverse)
        rows.append({
            "model": model_key[0], "n_helped": len(group), "n_reverse": n,
            "reverse_harm_rate": sum(r.rho < 1 for r in reverse) / n if n else None,
            "reverse_help_rate": sum(r.rho > 1 for r in reverse) / n if n else None,
        })
    return rows


# -- rate ladder (the public harness's views) -------------------------------------------------
def _ladder(arms: Sequence[ScoredAttempt | None]) -> dict[str, float | None]:
    n = len(arms)
    out: dict[str, float | None] = {}
    for t in LADDER:
        if n == 0:
            out[f"R@{t:g}"] = None
            continue
        hits = 0
        for o in arms:
            if o is None or not o.passed:
                continue
            s = o.speedup
            if t == 0.0 or (s is not None and s >= t):
                hits += 1
        out[f"R@{t:g}"] = hits / n
    values = [v for v in out.values() if v is not None]
    out["S"] = 100.0 * sum(values) / len(values) if values else None
    return out


def rate_ladder(comps: Sequence[Comparison]) -> list[dict[str, object]]:
    """R@t for base and skill arms (skipped treatments inherit the baseline) and S."""
    out: list[dict[str, object]] = []
    subsets: list[tuple[str, Callable[[Comparison], bool]]] = [
        ("all", lambda c: True),
        ("source_passed", lambda c: c.source.passed),
        ("source_failed", lambda c: not c.source.passed),
        ("source_wrote_skill", lambda c: not c.skipped),
    ]
    for name, pred in subsets:
        group = [c for c in comps if pred(c)]
        base = _ladder([c.baseline for c in group])
        skill = _ladder([c.treatment if c.treatment is not None else c.baseline for c in group])
        diff: dict[str, float | None] = {}
        for k in base:
            b, t = base[k], skill[k]
            diff[k] = None if b is None or t is None else t - b
        out.append({"subset": name, "n": len(group), "base": base, "skill": skill,
                    "difference": diff})
    return out


def coverage(rows: Sequence[ScoredAttempt], comps: Sequence[Comparison]) -> dict[str, object]:
    solos = [r for r in rows if r.arm == "solo"]
    with_skill = [r for r in solos if not r.skill_blank]
    return {
        "solo_attempts": len(solos),
        "skill_coverage": len(with_skill) / len(solos) if solos else None,
        "comparisons": len(comps),
        "source_coverage": (sum(not c.skipped for c in comps) / len(comps)) if comps else None,
        "source_pass_share": (sum(c.source.passed for c in comps) / len(comps)) if comps else None,
    }


def usage(rows: Sequence[ScoredAttempt]) -> list[dict[str, object]]:
    groups: dict[str, list[ScoredAttempt]] = defaultdict(list)
    for r in rows:
        groups[f"{r.arm}_{r.dsl}"].append(r)
    return [{"arm": arm, "attempts": len(g), "tokens": sum(r.tokens for r in g),
             "cost_usd": round(sum(r.cost_usd for r in g), 6),
             "agent_seconds": round(sum(r.agent_seconds for r in g), 3)}
            for arm, g in sorted(groups.items())]
