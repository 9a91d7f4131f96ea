"""``mkb bundle export``: an experiment of the store as one bundle (``docs/bundles.md``).

Members (every one listed in the manifest with its sha256 and size)::

    experiment/experiment.json   the experiment row (id, name, state, preview, backend, origin)
    experiment/config.json       the experiment config, parsed, without secret or API settings
    experiment/grading.json      contract version, grading backend and options
    experiment/hosts.json        the grading hosts the feedback names; the exporting host
    problems/index.json          each problem: id, family, catalog file, sha256
    problems/<file>.py           each problem's source, as in this catalog
    implementations/index.json   each graded implementation: attempt, purpose, verdict, feedback
    implementations/<id>.py      its source (finals; with ``--all`` every graded submission)
    skills/index.json, <id>.md   every attempt's latest skill and every attached skill
    results/attempts.json        the attempts (arms, outcomes, speedups, usage)
    results/comparisons.json     the stored comparisons
    results/analysis.json        ``mkb analyze --json`` of the experiment at export
    results/interventions.json   operators' commands: notes, exclusions, stops, retries, extends
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from engine.bundle import archive, hosts, secrets
from storage import controls, queries

NEVER_INCLUDED = (
    ".env and every environment variable",
    "model API settings (api_base, api_key_env) and any setting named like a key or token",
    "the raw config TOML (its comments may hold anything)",
    "trajectories, events, run locks, labels",
)


class ExportError(ValueError):
    """The experiment cannot be exported; the message says why."""


@dataclass(frozen=True)
class ExportResult:
    path: str
    sha256: str
    size_bytes: int
    members: int
    implementations: int
    redacted: list[str]
    scrubbed: list[str]
    seconds: float


def _json(value: Any) -> bytes:
    return (json.dumps(value, indent=1, sort_keys=True, default=str) + "\n").encode()


def _problem_files(problem_ids: Iterable[str]) -> dict[str, Path]:
    from problems.registry import problem_files

    wanted = set(problem_ids)
    return {
        p.stem.split("_", 1)[0]: p for p in problem_files() if p.stem.split("_", 1)[0] in wanted
    }


def _graded(db: Any, experiment_id: str, include_all: bool) -> list[dict[str, Any]]:
    purposes = ("final", "submission") if include_all else ("final",)
    marks = ", ".join("?" for _ in purposes)
    rows = db.execute(
        "SELECT s.id, s.attempt_id, s.try, s.purpose, s.n, s.source, s.source_hash, s.verdict, "
        "s.reason, s.speedup, s.impl_median_ms, s.eager_median_ms, s.feedback_json, "
        "s.graded_at, a.problem_id, a.dsl FROM submissions s JOIN attempts a "
        "ON a.id = s.attempt_id WHERE a.experiment_id = ? AND s.state = 'done' "
        f"AND s.purpose IN ({marks}) ORDER BY s.id",
        [experiment_id, *purposes],
    ).fetchall()
    keys = (
        "submission_id",
        "attempt_id",
        "try",
        "purpose",
        "n",
        "source",
        "source_hash",
        "verdict",
        "reason",
        "speedup",
        "impl_median_ms",
        "eager_median_ms",
        "feedback_json",
        "graded_at",
        "problem_id",
        "dsl",
    )
    return [dict(zip(keys, row, strict=True)) for row in rows]


def _config(exp: queries.ExperimentRow) -> tuple[dict[str, Any] | None, list[str]]:
    try:
        parsed = tomllib.loads(exp.config_toml) if exp.config_toml.strip() else {}
    except tomllib.TOMLDecodeError:
        return None, ["config (unreadable TOML: left out whole)"]
    return secrets.scrub(parsed)


def _implementation_members(graded: list[dict[str, Any]]) -> tuple[dict[str, bytes], list[Any]]:
    members: dict[str, bytes] = {}
    index: list[dict[str, Any]] = []
    for g in graded:
        member = f"implementations/{g['submission_id']}.py"
        members[member] = g.pop("source").encode()
        feedback = json.loads(g.pop("feedback_json") or "null")
        index.append({**g, "member": member, "feedback": feedback})
    return members, index


def _skill_members(db: Any, attempts: list[queries.AttemptRow]) -> dict[str, bytes]:
    rows: dict[int, queries.SkillRow] = {}
    for a in attempts:
        latest = queries.latest_skill(db, a.id)
        if latest is not None:
            rows[latest.id] = latest
        if a.attached_skill_id is not None and a.attached_skill_id not in rows:
            attached = queries.skill(db, a.attached_skill_id)
            if attached is not None:
                rows[attached.id] = attached
    members = {f"skills/{sid}.md": row.text.encode() for sid, row in sorted(rows.items())}
    index = [
        {k: v for k, v in asdict(row).items() if k != "text"} | {"member": f"skills/{sid}.md"}
        for sid, row in sorted(rows.items())
    ]
    return {"skills/index.json": _json(index), **members}


def _problem_members(problem_ids: set[str], families: dict[str, str]) -> dict[str, bytes]:
    files = _problem_files(problem_ids)
    missing = sorted(problem_ids - set(files))
    if missing:
        raise ExportError(f"problems {missing} are not in this catalog: cannot bundle them")
    members: dict[str, bytes] = {}
    index = []
    for pid, path in sorted(files.items()):
        data = path.read_bytes()
        members[f"problems/{path.name}"] = data
        index.append(
            {
                "id": pid,
                "family": families.get(pid, ""),
                "file": path.name,
                "member": f"problems/{path.name}",
                "sha256": archive.sha256(data),
            }
        )
    return {"problems/index.json": _json(index), **members}


def _analysis(db: Any, experiment_id: str) -> dict[str, Any]:
    from engine.analysis.outcomes import from_store
    from engine.analysis.report import analyze

    return analyze(from_store(db, experiment_id))


def collect(
    db: Any, experiment_id: str, *, include_all: bool = False
) -> tuple[dict[str, Any], dict[str, bytes], int]:
    """(manifest fields, members, number of implementations) of one experiment."""
    from engine.convergence import CONTRACT_VERSION

    exp = queries.experiment(db, experiment_id)
    if exp is None:
        raise ExportError(f"no experiment {experiment_id!r} in the database")
    attempts = queries.attempts_for_experiment(db, experiment_id)
    graded = _graded(db, experiment_id, include_all)
    config, scrubbed = _config(exp)
    impl_members, impl_index = _implementation_members(graded)
    grading_options = (config or {}).get("grading", {})
    exp_fields = {k: v for k, v in asdict(exp).items() if k != "config_toml"}
    members: dict[str, bytes] = {
        "experiment/experiment.json": _json(exp_fields),
        "experiment/config.json": _json(config),
        "experiment/grading.json": _json(
            {
                "contract_version": CONTRACT_VERSION,
                "grading_backend": exp.grading_backend,
                "options": grading_options,
                "preview": bool(exp.preview),
                "unsafe_no_jail": bool((config or {}).get("experiment", {}).get("unsafe_no_jail")),
            }
        ),
        "experiment/hosts.json": _json(
            {
                "graded_on": hosts.graded_on(
                    [i["feedback"] or {} for i in impl_index], exp.grading_backend
                ),
                "exported_on": hosts.describe_this_host(),
                "note": "graded_on comes from the stored feedback (its device); exported_on is the "
                "machine that wrote this bundle, which may not be the one that graded",
            }
        ),
        **_problem_members(
            {a.problem_id for a in attempts}, {a.problem_id: a.family for a in attempts}
        ),
        "implementations/index.json": _json(impl_index),
        **impl_members,
        **_skill_members(db, attempts),
        "results/attempts.json": _json([asdict(a) for a in attempts]),
        "results/comparisons.json": _json(
            [asdict(c) for c in queries.comparisons(db, experiment_id)]
        ),
        "results/analysis.json": _json(_analysis(db, experiment_id)),
        "results/interventions.json": _json(
            [asdict(c) for c in controls.for_experiment(db, experiment_id)]
        ),
    }
    manifest = {
        "format": archive.FORMAT,
        "schema_version": archive.SCHEMA_VERSION,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "generator": "mkb bundle export",
        "experiment": {
            "id": exp.id,
            "name": exp.name,
            "preview": bool(exp.preview),
            "attempts": len(attempts),
        },
        "contract_version": CONTRACT_VERSION,
        "include": "all" if include_all else "finals",
        "implementations": len(impl_index),
        "scrubbed_settings": scrubbed,
        "never_included": list(NEVER_INCLUDED),
    }
    return manifest, members, len(impl_index)


def export_bundle(
    db: Any,
    experiment_id: str,
    out: str | os.PathLike[str],
    *,
    include_all: bool = False,
    secret_values: Iterable[str] = (),
) -> ExportResult:
    """Write the bundle of one experiment to ``out``; secrets found in any member are
    replaced and the member named in the manifest (``redacted``)."""
    started = time.perf_counter()
    manifest, members, n_impl = collect(db, experiment_id, include_all=include_all)
    values = list(secret_values)
    members, redacted = secrets.redact(members, values)
    manifest = secrets.redact_value(manifest, values)
    manifest["redacted"] = redacted
    digest = archive.write_archive(out, manifest, members)
    return ExportResult(
        path=str(out),
        sha256=digest,
        size_bytes=Path(out).stat().st_size,
        members=len(members) + 1,
        implementations=n_impl,
        redacted=redacted,
        scrubbed=list(manifest["scrubbed_settings"]),
        seconds=time.perf_counter() - started,
    )
