"""``mkb import mkb-run DIR``: a public MetaKernelBench result store as an experiment.

The layout, from the public harness's own source (github YIGE24/MetaKernelBench): one store
per model (``metakernelbench/store.py``: ``store.json`` with the model, ``invocations.jsonl``,
the ``results.json`` snapshot, ``.lock``, ``archive/`` of superseded trials and
``problems/<problem>/``); one Harbor trial directory per problem, replicate and arm named
``<prefix>_p<NN>_r<n>_<arm>`` (``catalog.trial_coordinate``; the prefix is the first six hex
digits of the model's sha256), holding ``record.json`` (``results.TrialRecord``: rewards,
timed_out, error, skipped, usage, stamps), ``verdict.json`` (``judge.Verdict`` of the final
kernel: rewards, details with ``median_ms``, report), ``submissions.jsonl``
(``host._log_submission``), the collected ``artifacts/app/kernel.py`` and ``SKILL.md``, and
Harbor's own files (``agent/trajectory.json``, ``result.json``, ...); skill attachments sit
in ``problems/<problem>/skills/r<n>_<direction>.md`` (``store.skill_attachment_path``).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Any

from engine.imports.atif import trajectory_steps
from engine.imports.records import ARM_DSL, AttemptRecord, GradedRecord
from engine.imports.report import ImportReport

STORE_FILES = {"store.json", "invocations.jsonl", "results.json", ".lock", "archive", "problems"}
DSLS = {"cutedsl": "cute", "tirx": "tirx"}
ARMS = {
    "solo_cutedsl": "solo_cute",
    "solo_tirx": "solo_tirx",
    "cutedsl2tirx_skill": "cute2tirx_skill",
    "tirx2cutedsl_skill": "tirx2cute_skill",
}
PROBLEM_DIR = re.compile(r"([0-9]{2})_[a-z0-9]+(?:_[a-z0-9]+)*")
TRIAL_DIR = re.compile(r"([0-9a-f]{6})_p([0-9]{2})_r([0-9]+)_([a-z0-9_]+)")
ATTACHMENT = re.compile(r"r[0-9]+_(cutedsl2tirx|tirx2cutedsl)\.md")
RECORD_KEYS = {"rewards", "timed_out", "error", "skipped", "usage", "stamps"}
REWARD_KEYS = {"imported", "correct", "speedup_vs_eager", "passed"}
USAGE_KEYS = {"n_input_tokens", "n_cache_tokens", "n_output_tokens", "cost_usd", "agent_sec"}
TRIAL_FILES = {
    "record.json",
    "verdict.json",
    "submissions.jsonl",
    "artifacts",
    "agent",
    "verifier",
    "config.json",
    "lock.json",
    "result.json",
    "trial.log",
    "exception.txt",
}
TARGET_GPU = "b200"  # the public judge grades on a B200 (catalog.TARGET_GPU)


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def store_model(root: Path) -> str:
    """The model a public result store belongs to (its ``store.json``)."""
    try:
        model = _json(root / "store.json")["model"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{root}: not a public MetaKernelBench result store (store.json unreadable: {exc!r})"
        ) from exc
    if not isinstance(model, str) or not model:
        raise ValueError(f"{root}/store.json: model must be a non-empty string")
    return model


def verdict_of(rewards: dict[str, float]) -> tuple[str, str | None]:
    if rewards.get("passed", 0.0) >= 1.0:
        return "pass", None
    if not rewards:
        return "fail", "no_implementation"
    if rewards.get("imported", 0.0) < 1.0:
        return "fail", "mkb-run.import_failed"
    return "fail", "mkb-run.incorrect"


def _final_feedback(
    record: dict[str, Any], verdict: dict[str, Any] | None, pid: str, dsl: str
) -> dict[str, Any]:
    """The final verdict as this store's feedback; times from ``verdict.json``'s
    ``details.median_ms``, else eager = 1 ms and the kernel at 1 / speedup (flagged)."""
    rewards = {k: float(v) for k, v in (record.get("rewards") or {}).items()}
    outcome, reason = verdict_of(rewards)
    speedup = rewards.get("speedup_vs_eager") if outcome == "pass" else None
    medians = ((verdict or {}).get("details") or {}).get("median_ms") or {}
    impl, eager = medians.get("kernel"), medians.get("eager")
    derived = outcome == "pass" and not (impl and eager) and bool(speedup)
    if derived:
        impl, eager = 1.0 / float(speedup or 1.0), 1.0
    return {
        "verdict": outcome,
        "reason": reason,
        "problem_id": pid,
        "dsl": dsl,
        "message": str((verdict or {}).get("report") or "")[-4000:],
        "speedup": speedup,
        "impl_median_ms": impl if outcome == "pass" else None,
        "eager_median_ms": eager if outcome == "pass" else None,
        "device": "NVIDIA B200 (public MetaKernelBench judge)",
        "rewards": rewards,
        "timed_out": bool(record.get("timed_out")),
        "times_derived": derived,
        "origin": "mkb-run",
    }


def _submissions(trial: Path, report: ImportReport, pid: str, dsl: str) -> list[GradedRecord]:
    path = trial / "submissions.jsonl"
    if not path.is_file():
        return []
    out: list[GradedRecord] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        where = f"{path}:{number}"
        try:
            entry = json.loads(line)
        except ValueError:
            report.not_understood(where, "not a JSON line")
            continue
        if not isinstance(entry, dict) or "counted" not in entry:
            report.not_understood(where, "not a submission log entry (no 'counted')")
            continue
        if not entry["counted"]:
            report.aside(
                "submission not counted by the run (" + str(entry.get("note")) + ")", where
            )
            continue
        rewards = {k: float(v) for k, v in (entry.get("rewards") or {}).items()}
        verdict, reason = verdict_of(rewards)
        out.append(
            GradedRecord(
                "submission",
                len(out) + 1,
                "",
                backend="mkb-run",
                feedback={
                    "verdict": verdict,
                    "reason": reason,
                    "problem_id": pid,
                    "dsl": dsl,
                    "speedup": rewards.get("speedup_vs_eager") if verdict == "pass" else None,
                    "rewards": rewards,
                    "origin": "mkb-run",
                    "message": "the public harness keeps no submission source",
                    **{k: entry.get(k) for k in ("elapsed_sec", "wall_sec", "eval_sec", "id")},
                },
            )
        )
    return out


def _check_keys(record: dict[str, Any], where: Path, report: ImportReport) -> None:
    for key in sorted(set(record) - RECORD_KEYS):
        report.not_understood(f"{where}#{key}", "record field this importer does not know")
    for key in sorted(set(record.get("rewards") or {}) - REWARD_KEYS):
        report.not_understood(
            f"{where}#rewards.{key}", "reward this importer does not know (kept in the feedback)"
        )
    for key in sorted(set(record.get("usage") or {}) - USAGE_KEYS):
        report.not_understood(f"{where}#usage.{key}", "usage field this importer does not know")


def _text(path: Path) -> str | None:
    return path.read_text(encoding="utf-8", errors="replace") if path.is_file() else None


def _timing(trial: Path) -> tuple[str | None, str | None]:
    try:
        result = _json(trial / "result.json")
        return result.get("started_at"), result.get("finished_at")
    except (OSError, ValueError, AttributeError):
        return None, None


def read_trial(
    trial: Path, model: str, pid: str, family: str, arm: str, rep: int, report: ImportReport
) -> AttemptRecord | None:
    """One trial directory as an attempt (None: no record yet, reported)."""
    try:
        record = _json(trial / "record.json")
    except FileNotFoundError:
        report.aside("trial without record.json (not finished)", str(trial))
        return None
    except (OSError, ValueError) as exc:
        report.not_understood(str(trial / "record.json"), f"unreadable: {exc}")
        return None
    if not isinstance(record, dict):
        report.not_understood(str(trial / "record.json"), "not a JSON object")
        return None
    _check_keys(record, trial / "record.json", report)
    rec = AttemptRecord(
        model=model, problem_id=pid, family=family, arm=arm, replicate=rep, state="finished"
    )
    rec.started_at, rec.ended_at = _timing(trial)
    usage = record.get("usage") or {}
    rec.tokens_in, rec.tokens_out = (
        int(usage.get("n_input_tokens") or 0),
        int(usage.get("n_output_tokens") or 0),
    )
    rec.cost_usd, rec.agent_seconds = (
        float(usage.get("cost_usd") or 0.0),
        float(usage.get("agent_sec") or 0.0),
    )
    rec.skill = _text(trial / "artifacts" / "app" / "SKILL.md")
    rec.steps = trajectory_steps(trial / "agent" / "trajectory.json", report)
    if record.get("error") is not None:
        rec.state, rec.error = "interrupted", f"mkb-run error: {record['error']}"
        return rec
    if record.get("skipped") is not None:
        rec.state, rec.outcome, rec.reason = "skipped", "skipped", str(record["skipped"])
        return rec
    verdict = _json(trial / "verdict.json") if (trial / "verdict.json").is_file() else None
    feedback = _final_feedback(record, verdict, pid, ARM_DSL[arm])
    rec.final_source = _text(trial / "artifacts" / "app" / "kernel.py")
    rec.graded = [
        *_submissions(trial, report, pid, ARM_DSL[arm]),
        GradedRecord("final", 1, rec.final_source or "", feedback, backend="mkb-run"),
    ]
    rec.outcome, rec.reason = feedback["verdict"], feedback["reason"]
    rec.speedup = feedback["speedup"]
    rec.impl_median_ms, rec.eager_median_ms = (
        feedback["impl_median_ms"],
        feedback["eager_median_ms"],
    )
    if feedback["times_derived"]:
        report.count("finals with times derived from the speedup (no verdict.json)")
    return rec


@functools.cache
def _catalog_folders() -> dict[str, str]:
    """This catalog's problem file stems and their family folders."""
    from problems.registry import problem_files

    return {p.stem: p.parent.name for p in problem_files()}


def problem_of(name: str, report: ImportReport, path: Path) -> tuple[str, str] | None:
    """(our problem id, family) of a public problem directory name, else None (reported)."""
    from problems.spec import FAMILY_DIRS

    if PROBLEM_DIR.fullmatch(name) is None:
        report.not_understood(str(path), "not a problem directory name (NN_<slug>)")
        return None
    pid = f"p{name[:2]}"
    ours = _catalog_folders()
    folder = ours.get(f"p{name}")
    if folder is None:
        same_number = sorted(s for s in ours if s.startswith(pid + "_"))
        report.notes.append(
            f"{name}: not in this catalog by name (ours: {same_number or '-'}); imported as {pid}"
        )
        folder = ours.get(same_number[0], "") if same_number else ""
    return pid, FAMILY_DIRS.get(folder, folder or "unknown")


def read_problem(path: Path, model: str, report: ImportReport) -> list[AttemptRecord]:
    """Every trial of one problem directory."""
    found = problem_of(path.name, report, path)
    if found is None:
        return []
    pid, family = found
    prefix = hashlib.sha256(model.encode()).hexdigest()[:6]
    out: list[AttemptRecord] = []
    for entry in sorted(path.iterdir()):
        if entry.name == "skills" and entry.is_dir():
            for f in sorted(entry.iterdir()):
                if ATTACHMENT.fullmatch(f.name):
                    report.aside(
                        "skill attachment (the source's SKILL.md, imported with it)", str(f)
                    )
                else:
                    report.not_understood(str(f), "not a skill attachment (r<n>_<dir>.md)")
            continue
        m = TRIAL_DIR.fullmatch(entry.name)
        if m is None or not entry.is_dir() or m.group(4) not in ARMS:
            report.not_understood(str(entry), "not a trial directory of this layout")
            continue
        if m.group(1) != prefix or f"p{m.group(2)}" != pid:
            report.not_understood(
                str(entry),
                f"trial of another store or problem (prefix "
                f"{m.group(1)}, this model's is {prefix})",
            )
            continue
        for extra in sorted(set(p.name for p in entry.iterdir()) - TRIAL_FILES):
            report.not_understood(str(entry / extra), "file this importer does not know")
        rec = read_trial(entry, model, pid, family, ARMS[m.group(4)], int(m.group(3)), report)
        if rec is not None:
            out.append(rec)
    return out


def read_store(root: Path, report: ImportReport) -> list[AttemptRecord]:
    """Every attempt of a public result store; what is not imported is reported."""
    model = store_model(root)
    report.model = model
    for entry in sorted(root.iterdir()):
        if entry.name in STORE_FILES:
            continue
        if entry.name.endswith(".tmp"):
            report.aside("half-written temporary file", str(entry))
        else:
            report.not_understood(str(entry), "not part of a public result store")
    if (root / ".lock").exists():
        report.notes.append(".lock present: the run may still be writing this store")
    archive = root / "archive"
    if archive.is_dir():
        for old in sorted(archive.iterdir()):
            report.aside("archived (superseded) trial", str(old))
    records: list[AttemptRecord] = []
    problems = root / "problems"
    for entry in sorted(problems.iterdir()) if problems.is_dir() else []:
        if entry.is_dir():
            records += read_problem(entry, model, report)
        else:
            report.not_understood(str(entry), "not a problem directory")
    return records
