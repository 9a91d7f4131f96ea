"""Calibration through the real scheduler (docs/analysis.md, "Calibration"): each experiment is
run by ``engine.scheduler.Engine`` with the simulated agent and the simulated grader
(``engine.standins.simulated``) into a real SQLite store, with paired finals
(``[grading] paired_repeats`` = 3, 5 or ``"adaptive"`` up to 5, the engine's own sequential
rule and bands); then the real analysis (``engine.analysis.paired_lift.paired_report``, what
``mkb analyze --json`` shows under ``paired``) reads the store, and each comparison's call on
the end-to-end clock is checked against its known true effect.

An experiment has ``problems`` problems × ``replicates`` × 2 directions comparisons (one model):
half the problems null (ρ = 1), a quarter 1.1× and a quarter 1.3× help (the treatment's true
runtime is 1/ρ of the baseline's). The grader's slots sit on simulated hosts with a known speed
and log-normal noise (a CV). Scenarios: CV 3/10/25 % on one host; two hosts, the second 10 %
slower (each paired job on one slot, as the engine places it); gradings spread over the two
hosts whatever slot a job names (each on a slot drawn from its request id: a pool that ignores
paired slots; the analysis leaves out a pair split over two hosts and labels a comparison with
no pair on one host ``cross_host``); mixed DSL noise (CuTe
3 %, TIRx 25 %); 2× outliers (a tenth of gradings).
Gradings counted are the paired jobs' (each attempt's own final is common to every design).

    .venv/bin/python benchmarks/noise_calibration_engine.py [--experiments 3] [--final-repeats 3]
        [--scenario "cv3 one host" --scenario "cv3 2x outliers (a tenth of gradings)"]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from engine.analysis.paired_lift import paired_report
from engine.config import parse_config
from engine.factory import make_runner
from engine.scheduler import Engine
from engine.standins.simulated import SimulatedBackend
from storage import repeats as repeat_rows
from storage.store import Store

EFFECTS = (1.0, 1.1, 1.3)
DESIGNS = {"fixed_k3": "3", "fixed_k5": "5", "adaptive_max5": '"adaptive"\npaired_max = 5'}
CONFIG = """
[experiment]
name = "calib"
problems = {problems!r}
replicates = {replicates}
max_submissions = 0
agent = "simulated"
grading = "simulated"

[agent]
blank_skill_rate = 0.0
final_runtime_ms = 0.5
skill_runtime_factor = {{ {factors} }}

[grading]
paired_repeats = {design}
final_repeats = {final_repeats}

[[models]]
name = "sim/a"

[concurrency]
sandboxes = 8
attempts_per_model = 8
grading_slots = 2
"""


@dataclass(frozen=True)
class Scenario:
    """A simulated grader: its hosts' speed and noise (see the module docstring)."""

    name: str
    cv: float
    hosts: tuple[str, ...] = ("host0",)
    host_speed: dict[str, float] = field(default_factory=dict)
    dsl_cv: dict[str, float] = field(default_factory=dict)
    outlier_rate: float = 0.0
    scatter: bool = False

    def backend(self, seed: int) -> SimulatedBackend:
        return SimulatedBackend(
            slots=2,
            hosts=self.hosts,
            host_speed=self.host_speed,
            noise_cv={"default": self.cv},
            dsl_cv=self.dsl_cv,
            outlier_rate=self.outlier_rate,
            scatter=self.scatter,
            seed=seed,
        )


def scenarios() -> list[Scenario]:
    two = ("host0", "host1")
    out = []
    for cv in (0.03, 0.10, 0.25):
        tag = f"cv{round(cv * 100)}"
        out.append(Scenario(f"{tag} one host", cv))
        out.append(Scenario(f"{tag} two hosts (+10 %)", cv, two, {"host1": 1.10}))
    out.append(Scenario("cv3 gradings spread over two hosts", 0.03, two, scatter=True))
    out.append(Scenario("mixed DSL noise (CuTe 3 % / TIRx 25 %)", 0.03, dsl_cv={"tirx": 0.25}))
    out.append(Scenario("cv3 2x outliers (a tenth of gradings)", 0.03, outlier_rate=0.1))
    return out


def effects_of(problems: int) -> dict[str, float]:
    """Problem id → true ρ: half null, a quarter 1.1×, a quarter 1.3× (at least one each)."""
    helped = max(problems // 4, 1)
    nulls = problems - 2 * helped
    truth = [1.0] * nulls + [1.1] * helped + [1.3] * helped
    return {f"p{i + 1:02d}": rho for i, rho in enumerate(truth)}


def run_experiment(
    sc: Scenario,
    design: str,
    truth: dict[str, float],
    replicates: int,
    seed: int,
    db: Path,
    final_repeats: int = 1,
) -> dict[str, Any]:
    """One experiment through the engine into ``db``; its calls and paired gradings.
    ``final_repeats``: each attempt's own final graded that often (solo series: more bands)."""
    factors = ", ".join(f"{p} = {1 / rho!r}" for p, rho in truth.items())
    toml = CONFIG.format(
        problems=sorted(truth),
        replicates=replicates,
        factors=factors,
        design=DESIGNS[design],
        final_repeats=final_repeats,
    )
    config = parse_config(toml, "calib.toml", check_problems=False)
    with Store(db) as store:
        engine = Engine(store, config, make_runner(config), sc.backend(seed))
        asyncio.run(engine.run())
        report = store.read_sync(paired_report, "calib")
        rows = store.read_sync(repeat_rows.paired_rows, "calib")
    gradings = sum(1 for rs in rows.values() for r in rs if r.state == "done")
    calls = [(r["call"], truth[r["problem"]], r["status"]) for r in report["comparisons"]]
    return {"calls": calls, "gradings": gradings, "null_ps": _null_ps(report, truth)}


def _null_ps(report: dict[str, Any], truth: dict[str, float]) -> list[float]:
    """The p-values BH took for the tested null comparisons (end to end): under a valid test
    a share x of them lies below x."""
    out = []
    for r in report["comparisons"]:
        clock = r["clocks"]["e2e"]
        p = clock["sequential_p"] if clock.get("sequential_p") is not None else clock["p"]
        if truth[r["problem"]] == 1.0 and r["status"] == "paired" and p is not None:
            out.append(float(p))
    return out


def clopper_pearson(hits: int, n: int, level: float = 0.95) -> tuple[float, float] | None:
    """The exact (Clopper–Pearson) interval of a binomial share ``hits / n`` (None at n = 0)."""
    if n == 0:
        return None
    tail = (1 - level) / 2
    low = float(stats.beta.ppf(tail, hits, n - hits + 1)) if hits else 0.0
    high = float(stats.beta.ppf(1 - tail, hits + 1, n - hits)) if hits < n else 1.0
    return low, high


def _se(values: list[float]) -> float | None:
    """The standard error of a mean over experiments (their spread / √n; None below 2)."""
    return float(np.std(values, ddof=1) / np.sqrt(len(values))) if len(values) > 1 else None


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """False calls (share of nulls called), observed FDR (mean over experiments of wrong
    calls / calls, 0 without calls: the FDR's definition), the pooled FDR (wrong calls / all
    calls across experiments, with its Clopper–Pearson 95 % interval: the honest figure where
    calls are rare), detection per effect, paired gradings per comparison, cross_host share.
    ``*_se``: standard errors from the spread across experiments (comparisons of one
    experiment share their bands, so they are not independent draws)."""
    comps = gradings = cross = wrong_all = called_all = 0
    fdps: list[float] = []
    per_comparison: list[float] = []  # paired gradings per comparison, per experiment
    false_rates: list[float] = []
    nulls_of: list[list[int]] = []
    effects = set(EFFECTS[1:]) | {rho for r in results for _, rho, _ in r["calls"]} - {1.0}
    hits: dict[float, list[list[int]]] = {e: [] for e in sorted(effects)}
    for r in results:
        wrong = called = 0
        tally = {e: [0, 0] for e in (1.0, *hits)}
        for call, rho, status in r["calls"]:
            is_call = call in ("help", "harm")
            called += is_call
            wrong += is_call and (rho == 1.0 or call == "harm")
            cross += status == "cross_host"
            tally[rho][0] += is_call if rho == 1.0 else call == "help"
            tally[rho][1] += 1
        fdps.append(wrong / called if called else 0.0)
        false_rates.append(tally[1.0][0] / tally[1.0][1] if tally[1.0][1] else 0.0)
        nulls_of.append(tally[1.0])
        for e in hits:
            hits[e].append(tally[e])
        wrong_all += wrong
        called_all += called
        comps += len(r["calls"])
        gradings += r["gradings"]
        per_comparison.append(r["gradings"] / len(r["calls"]) if r["calls"] else 0.0)
    false, nulls = (sum(col) for col in zip(*nulls_of, strict=True)) if nulls_of else (0, 0)
    detect = {}
    for e, per in hits.items():
        n = sum(t for _, t in per)
        detect[f"detect_{e}"] = sum(h for h, _ in per) / n if n else None
        detect[f"detect_{e}_se"] = _se([h / t for h, t in per if t])
    null_ps = [p for r in results for p in r.get("null_ps", ())]
    return {
        "null_p_below": {
            f"{x:g}": float(np.mean([p < x for p in null_ps])) if null_ps else None
            for x in (0.01, 0.025, 0.05)
        },
        "false_call_rate": false / nulls if nulls else None,
        "false_call_rate_se": _se(false_rates),
        "fdr": float(np.mean(fdps)) if fdps else None,
        "fdr_se": _se(fdps),
        "calls": called_all,
        "wrong_calls": wrong_all,
        "pooled_fdr": wrong_all / called_all if called_all else None,
        "pooled_fdr_ci95": clopper_pearson(wrong_all, called_all),
        **detect,
        "gradings_per_comparison": gradings / comps if comps else None,
        "gradings_per_comparison_se": _se(per_comparison),
        "cross_host_share": cross / comps if comps else None,
        "comparisons": comps,
    }


def saving(designs: dict[str, Any]) -> float:
    """The adaptive design's paired gradings saved against fixed k = 5."""
    adaptive = designs["adaptive_max5"]["gradings_per_comparison"]
    return round(1 - adaptive / designs["fixed_k5"]["gradings_per_comparison"], 3)


def calibrate_engine(
    experiments: int,
    problems: int,
    replicates: int,
    seed: int,
    out: Path | None,
    final_repeats: int = 1,
    only: tuple[str, ...] = (),
    designs: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Every scenario (``only``: those named) × design (``designs``: those named) through the
    engine; the summary (also written to ``out``)."""
    start = time.perf_counter()
    truth = effects_of(problems)
    rows: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="mkb-calib-") as tmp:
        for i, sc in enumerate(scenarios()):
            if only and sc.name not in only:
                continue
            rows[sc.name] = {}
            for design in DESIGNS:
                if designs and design not in designs:
                    continue
                results = []
                for e in range(experiments):
                    db = Path(tmp) / f"s{i}-{design}-{e}.sqlite"
                    seeded = seed + 1000 * i + e
                    results.append(
                        run_experiment(sc, design, truth, replicates, seeded, db, final_repeats)
                    )
                rows[sc.name][design] = summarize(results)
    summary = {
        "level": "through the engine (scheduler, simulated agent and grader, SQLite store)",
        "measured_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": f"{platform.node()} ({platform.processor() or platform.machine()})",
        "experiments": experiments,
        "comparisons_per_experiment": 2 * problems * replicates,
        "final_repeats": final_repeats,
        "effects": truth,
        "scenarios": rows,
        "adaptive_saving": {
            name: saving(r) for name, r in rows.items() if {"adaptive_max5", "fixed_k5"} <= set(r)
        },
        "seconds": round(time.perf_counter() - start, 1),
    }
    if out is not None:
        out.write_text(json.dumps(summary, indent=1) + "\n")
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--experiments", type=int, default=3)
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--replicates", type=int, default=6)
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument(
        "--final-repeats", type=int, default=1, help="gradings of each final (3: solo bands)"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        default=[],
        choices=[sc.name for sc in scenarios()],
        help="run only this scenario (repeatable; default: every one)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("docs/bench-records/2026-12-07-noise-calibration-engine-sequential-p.json"),
    )
    parser.add_argument(
        "--design",
        action="append",
        default=[],
        choices=list(DESIGNS),
        help="run only this design (repeatable; default: every one)",
    )
    args = parser.parse_args()
    summary = calibrate_engine(
        args.experiments,
        args.problems,
        args.replicates,
        args.seed,
        args.out,
        args.final_repeats,
        tuple(args.scenario),
        tuple(args.design),
    )
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
