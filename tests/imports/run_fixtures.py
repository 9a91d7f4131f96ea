"""Small run directories in the formats' own layouts, for the importers' tests.

Where each field comes from:

* public MetaKernelBench (github YIGE24/MetaKernelBench, read at commit d90ba286):
  - store layout, file names: ``metakernelbench/store.py`` (``IDENTITY_NAME = "store.json"``,
    ``INVOCATIONS_NAME``, ``SNAPSHOT_NAME = "results.json"``, ``PROBLEMS_NAME``,
    ``SKILLS_NAME``, ``RECORD_NAME = "record.json"``, ``VERDICT_NAME``, ``SUBMISSIONS_NAME``,
    ``ARTIFACTS_NAME``; ``claim_store`` writes model, prefix, created_at; the prefix is
    ``sha256(model)[:6]``; ``trial_dir`` is ``<prefix>_<coordinate>``;
    ``skill_attachment_path`` is ``skills/r<n>_<direction>.md``);
  - trial coordinates and arms: ``metakernelbench/catalog.py`` (``trial_coordinate`` =
    ``p<NN>_r<n>_<arm>``, ``solo_arm`` = ``solo_<dsl>``, ``skill_arm`` = ``<a>2<b>_skill``, DSL
    names ``cutedsl`` and ``tirx``, ``KERNEL_PATH = /app/kernel.py``, ``SKILL_PATH``);
  - ``record.json``: ``metakernelbench/results.py`` (``write_trial_record``: the fields of
    ``TrialRecord`` — rewards, timed_out, error, skipped, usage (``Usage``: n_input_tokens,
    n_cache_tokens, n_output_tokens, cost_usd, agent_sec) — plus ``stamps`` (``TrialStamps``:
    task_fingerprint, skill_sha256));
  - ``verdict.json``: ``metakernelbench/trial.py`` (``_grade_final_kernel`` writes
    ``asdict(Verdict)``), ``metakernelbench/judge.py`` (``Verdict``: rewards, details, report,
    stderr, eval_sec), ``metakernelbench/template/grader.py`` (``REWARD_KEYS`` imported,
    correct, speedup_vs_eager, passed; ``_score``'s details: error, mismatch, assignment,
    n_correct_draws, ``median_ms`` {kernel, eager});
  - ``submissions.jsonl``: ``metakernelbench/host.py`` (``_log_submission``: id, elapsed_sec,
    counted, rewards, note, wall_sec, eval_sec);
  - skipped treatments and attachments: ``metakernelbench/protocol.py`` (``_run_skill``: the
    record ``skipped="the source solo wrote no SKILL.md"``; no record at all when the source
    failed) and ``metakernelbench/skill.py`` (``SKILL_HEADER`` + the source's SKILL.md);
  - ``results.json``: the ``LEGEND`` and field names of ``metakernelbench/results.py``; the
    figures are computed below, independently, from those definitions.
* Harbor 0.25 (the installed package): ``TrialResult`` and its parts
  (``harbor/models/trial/result.py``), ``TrialConfig``/``TaskConfig``/``AgentConfig``
  (``harbor/models/trial/config.py``), ``AgentContext`` (``harbor/models/agent/context.py``),
  ``VerifierResult``, the ATIF ``Trajectory``/``Step`` (``harbor/models/trajectories``), the
  job files (``harbor/job.py``: config.json, result.json; ``JobConfig``, ``JobResult``,
  ``JobStats``) and the trial files (``harbor/models/trial/paths.py``: result.json,
  config.json, agent/trajectory.json, verifier/reward.json, artifacts/<container path>):
  the JSON is written by those models themselves.
"""

from __future__ import annotations

import hashlib
import json
import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

MODEL = "openrouter/acme/kernel-model-1"
PROBLEMS = (
    ("01_gqa_paged_decode_h32_kv8_d128_ps1_bf16", "attention"),
    ("28_fused_add_rmsnorm_h4096_llama31_8b_bf16", "mlp_norm"),
)
ARMS = ("solo_cutedsl", "solo_tirx", "cutedsl2tirx_skill", "tirx2cutedsl_skill")
DIRECTIONS = (("cutedsl", "tirx"), ("tirx", "cutedsl"))
THRESHOLDS = (0.0, 0.5, 1.0, 2.0, 4.0)
SKILL_HEADER = (
    "## Skill from a prior attempt\n\nThis skill was distilled while working on "
    "this same problem in a different kernel DSL.\n\n"
)
START = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)


@dataclass
class Trial:
    """One fixture trial: what its record and files say."""

    problem: str
    replicate: int
    arm: str
    passed: bool = True
    speedup: float = 1.5
    skill: str | None = "- measured: one CTA per row reached 70 % of bandwidth\n"
    error: str | None = None
    skipped: str | None = None
    verdict_json: bool = True  # False: only record.json (times must come from the speedup)
    submissions: list[dict[str, Any]] = field(default_factory=list)
    extra_file: str | None = None  # a file the importer does not know


def prefix(model: str = MODEL) -> str:
    return hashlib.sha256(model.encode()).hexdigest()[:6]


def trial_dir(root: Path, t: Trial, model: str = MODEL) -> Path:
    return (
        root / "problems" / t.problem / f"{prefix(model)}_p{t.problem[:2]}_r{t.replicate}_{t.arm}"
    )


def _rewards(t: Trial) -> dict[str, float]:
    if t.error is not None or t.skipped is not None:
        return {}
    return {
        "imported": 1.0,
        "correct": 1.0 if t.passed else 0.0,
        "speedup_vs_eager": t.speedup if t.passed else 0.0,
        "passed": 1.0 if t.passed else 0.0,
    }


def _usage(t: Trial, i: int) -> dict[str, Any] | None:
    if t.error is not None or t.skipped is not None:
        return None
    return {
        "n_input_tokens": 1000 + i,
        "n_cache_tokens": 100,
        "n_output_tokens": 200 + i,
        "cost_usd": 0.01 * (i + 1),
        "agent_sec": 60.0 + i,
    }


def _write(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(value if isinstance(value, str) else json.dumps(value, indent=2))


def _harbor_result(t: Trial, d: Path, i: int) -> str:
    from harbor.models.agent.context import AgentContext
    from harbor.models.task.id import LocalTaskId
    from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
    from harbor.models.trial.result import AgentInfo, ModelInfo, TimingInfo, TrialResult

    task = f"{t.problem}_{t.arm.split('_')[-1] if t.arm.startswith('solo') else _target(t.arm)}"
    started = START + timedelta(minutes=5 * i)
    usage = _usage(t, i) or {}
    return TrialResult(
        task_name=task,
        trial_name=d.name,
        trial_uri=d.as_uri(),
        task_id=LocalTaskId(path=Path("/build/tasks") / task),
        task_checksum="0" * 64,
        config=TrialConfig(
            task=TaskConfig(path=Path("/build/tasks") / task),
            trial_name=d.name,
            trials_dir=d.parent,
            agent=AgentConfig(name="terminus-2", model_name=MODEL),
        ),
        agent_info=AgentInfo(
            name="terminus-2",
            version="2.0.0",
            model_info=ModelInfo(name="kernel-model-1", provider="openrouter"),
        ),
        agent_result=AgentContext(
            n_input_tokens=usage.get("n_input_tokens"),
            n_output_tokens=usage.get("n_output_tokens"),
            cost_usd=usage.get("cost_usd"),
        ),
        started_at=started,
        finished_at=started + timedelta(minutes=4),
        agent_execution=TimingInfo(
            started_at=started,
            finished_at=started + timedelta(seconds=float(usage.get("agent_sec") or 0)),
        ),
    ).model_dump_json(indent=2)


def _target(arm: str) -> str:
    return arm.split("2")[1].removesuffix("_skill")


def trajectory(i: int) -> str:
    """A two-step ATIF trajectory written by Harbor's own model."""
    from harbor.models.trajectories.agent import Agent
    from harbor.models.trajectories.metrics import Metrics
    from harbor.models.trajectories.observation import Observation
    from harbor.models.trajectories.observation_result import ObservationResult
    from harbor.models.trajectories.step import Step
    from harbor.models.trajectories.tool_call import ToolCall
    from harbor.models.trajectories.trajectory import Trajectory

    return Trajectory(
        schema_version="ATIF-v1.6",
        session_id=f"s{i}",
        agent=Agent(name="terminus-2", version="2.0.0", model_name=MODEL),
        steps=[
            Step(step_id=1, source="user", message="Write kernel.py for the problem."),
            Step(
                step_id=2,
                source="agent",
                message="Analysis: read the reference.\nPlan: cat it.",
                tool_calls=[
                    ToolCall(
                        tool_call_id="c1",
                        function_name="bash_command",
                        arguments={"keystrokes": "cat problem.py\n"},
                    )
                ],
                observation=Observation(
                    results=[
                        ObservationResult(
                            source_call_id="c1", content=f"def reference(x): ...  # trial {i}"
                        )
                    ]
                ),
                metrics=Metrics(prompt_tokens=900, completion_tokens=120),
            ),
        ],
    ).model_dump_json(indent=2, exclude_none=True)


def write_trial(root: Path, t: Trial, i: int) -> Path:
    d = trial_dir(root, t)
    skill_sha = None
    if t.arm.endswith("_skill") and t.skipped is None and t.error is None:
        src = next(
            x
            for x in _ALL
            if x.problem == t.problem
            and x.replicate == t.replicate
            and x.arm == f"solo_{t.arm.split('2')[0]}"
        )
        attachment = SKILL_HEADER + (src.skill or "")
        _write(
            root / "problems" / t.problem / "skills" / f"r{t.replicate}_{t.arm[:-6]}.md", attachment
        )
        skill_sha = hashlib.sha256(attachment.encode()).hexdigest()
    _write(
        d / "record.json",
        {
            "rewards": _rewards(t),
            "timed_out": False,
            "error": t.error,
            "skipped": t.skipped,
            "usage": _usage(t, i),
            "stamps": {"task_fingerprint": "f" * 16, "skill_sha256": skill_sha},
        },
    )
    if t.error is None and t.skipped is None:
        if t.verdict_json:
            details: dict[str, Any] = {
                "error": None,
                "mismatch": None,
                "n_correct_draws": 5,
                "assignment": {"correctness": [1], "warmup": [2], "timing": [3], "sentinel": "S "},
            }
            if t.passed:
                details["median_ms"] = {"kernel": 0.5, "eager": 0.5 * t.speedup}
            _write(
                d / "verdict.json",
                {
                    "rewards": _rewards(t),
                    "details": details,
                    "report": "passed:   yes\n" if t.passed else "no\n",
                    "stderr": "",
                    "eval_sec": 41.0,
                },
            )
        _write(d / "artifacts" / "app" / "kernel.py", f"def solve(*xs):  # trial {i}\n    ...\n")
        _write(d / "submissions.jsonl", "".join(json.dumps(s) + "\n" for s in t.submissions))
    if t.skill is not None and t.error is None and t.skipped is None:
        _write(d / "artifacts" / "app" / "SKILL.md", t.skill)
    if t.skipped is None:  # a skipped treatment never ran: only its record exists
        _write(d / "result.json", _harbor_result(t, d, i))
        _write(d / "agent" / "trajectory.json", trajectory(i))
        _write(d / "trial.log", "harbor trial log\n")
    if t.extra_file:
        _write(d / t.extra_file, "not part of the layout\n")
    return d


_ALL: list[Trial] = []


def default_trials() -> list[Trial]:
    """2 problems × 2 replicates × 4 arms, with a pass at exactly 2×, failures, a skipped
    treatment (blank source skill), an errored trial, a final without verdict.json and a
    few records the importer must report."""
    sp = {
        ("01", 1): (2.0, 0.75, 3.0, 1.25),
        ("01", 2): (1.5, 4.5, 2.5, 0.5),
        ("28", 1): (0.9, 2.2, 1.1, 5.0),
        ("28", 2): (2.0, 1.0, 4.0, 3.5),
    }
    out = []
    for problem, _ in PROBLEMS:
        for rep in (1, 2):
            speeds = sp[(problem[:2], rep)]
            for arm, speed in zip(ARMS, speeds, strict=True):
                out.append(Trial(problem, rep, arm, speedup=speed))
    out[1].passed = False  # p01 r1 solo_tirx fails
    out[4].skill = "   \n"  # p01 r2 solo_cutedsl writes a blank SKILL.md ...
    out[6].skipped = "the source solo wrote no SKILL.md"  # ... so cutedsl2tirx is skipped
    out[9].error = "EnvironmentStartTimeoutError: sandbox did not start"  # p28 r1 solo_tirx ...
    out[10].verdict_json = False
    out[12].submissions = [
        {
            "id": "a1",
            "elapsed_sec": 300.0,
            "counted": True,
            "rewards": {"imported": 1.0, "correct": 1.0, "speedup_vs_eager": 1.2, "passed": 1.0},
            "note": None,
            "wall_sec": 50.0,
            "eval_sec": 40.0,
        },
        {
            "id": "a2",
            "elapsed_sec": 900.0,
            "counted": False,
            "rewards": None,
            "note": "limit reached",
            "wall_sec": None,
            "eval_sec": None,
        },
    ]
    out[13].extra_file = "notes.txt"
    del out[11]  # ... so its tirx2cutedsl treatment never ran: no trial directory at all
    return out


def _record(root: Path, t: Trial) -> dict[str, Any] | None:
    path = trial_dir(root, t) / "record.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _attains(rec: dict[str, Any], t: float) -> bool:
    r = rec["rewards"]
    return r.get("passed", 0.0) >= 1.0 and r.get("speedup_vs_eager", 0.0) >= t


def _ladder(recs: list[dict[str, Any]]) -> dict[str, float]:
    rates = {f"R@{t:g}": statistics.mean(_attains(r, t) for r in recs) for t in THRESHOLDS}
    return {**rates, "S": 100 * statistics.mean(rates.values())}


def _contrast(reps: list[dict[str, Any]]) -> dict[str, Any]:
    if not reps:
        return {"base": None, "skill": None, "lift": None}
    base = _ladder([r["base"] for r in reps])
    skill = _ladder([r["base"] if r["skill"]["skipped"] else r["skill"] for r in reps])
    return {"base": base, "skill": skill, "lift": {k: skill[k] - base[k] for k in base}}


def _group(reps: list[dict[str, Any]]) -> dict[str, Any]:
    done = [
        r
        for r in reps
        if all(r[k] is not None and r[k]["error"] is None for k in ("source", "base", "skill"))
    ]
    mean = lambda xs: statistics.mean(xs) if xs else None  # noqa: E731
    return {
        "n_cell_replicates": len(reps),
        "n_resolved": len(done),
        "source_coverage": mean([_attains(r["source"], 0.0) for r in done]),
        "skill_coverage": mean([r["skill"]["skipped"] is None for r in done]),
        **_contrast(done),
        "with_skill": _contrast([r for r in done if r["skill"]["skipped"] is None]),
        "by_source_verdict": {
            "passed": _contrast([r for r in done if _attains(r["source"], 0.0)]),
            "failed": _contrast([r for r in done if not _attains(r["source"], 0.0)]),
        },
        "usage": {},
    }


def expected_snapshot(root: Path, trials: list[Trial]) -> dict[str, Any]:
    """``results.json`` as the public LEGEND defines it, computed from the records on disk."""
    cells = []
    for problem, category in PROBLEMS:
        for src, tgt in DIRECTIONS:
            reps = []
            for rep in sorted({t.replicate for t in trials if t.problem == problem}):
                reps.append(
                    {
                        role: _record(root, Trial(problem, rep, arm))
                        for role, arm in (
                            ("source", f"solo_{src}"),
                            ("base", f"solo_{tgt}"),
                            ("skill", f"{src}2{tgt}_skill"),
                        )
                    }
                )
            cells.append(
                ({"problem": problem, "category": category, "direction": f"{src}2{tgt}"}, reps)
            )
    all_reps = [r for _, reps in cells for r in reps]
    return {
        "legend": {},
        "model": MODEL,
        "harbor_version": "0.25.0",
        "overall": {
            "n_cells": len(cells),
            **_group(all_reps),
            "by_direction": {
                f"{s}2{t}": _group(
                    [r for c, reps in cells for r in reps if c["direction"] == f"{s}2{t}"]
                )
                for s, t in DIRECTIONS
            },
            "by_category": {
                cat: _group([r for c, reps in cells for r in reps if c["category"] == cat])
                for _, cat in PROBLEMS
            },
        },
        "cells": [{"cell": c, **_group(reps), "replicates": []} for c, reps in cells],
    }


def build_mkb_run(root: Path, trials: list[Trial] | None = None) -> Path:
    """A public result store of one model under ``root``; returns its directory."""
    trials = default_trials() if trials is None else trials
    _ALL[:] = trials
    _write(
        root / "store.json",
        {"model": MODEL, "prefix": prefix(), "created_at": "2026-11-20T09:00:00+00:00"},
    )
    _write(
        root / "invocations.jsonl",
        json.dumps(
            {
                "started_at": "2026-11-20T09:00:00+00:00",
                "model": MODEL,
                "categories": [],
                "problems": "*",
                "trials": "*",
                "n_replicates": 2,
                "n_concurrent": 10,
                "rerun_stale": False,
                "harbor_version": "0.25.0",
                "commit": "d90ba286",
                "plan": {"reuse": 0, "run": 16, "rerun": 0, "stale": 0},
            }
        )
        + "\n",
    )
    for i, t in enumerate(trials):
        write_trial(root, t, i)
    _write(root / "archive" / "2026-11-19__10-00-00__old_trial" / "record.json", "{}")
    _write(root / "results.json", expected_snapshot(root, trials))
    return root
