"""A verified bundle, read into typed records (``mkb bundle verify``, ``mkb regrade``)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.bundle import archive
from engine.bundle.archive import BundleError, Problem


@dataclass(frozen=True)
class Implementation:
    """One graded implementation in a bundle and the verdict it had there."""

    submission_id: int
    attempt_id: int
    try_number: int
    purpose: str
    n: int
    problem_id: str
    dsl: str
    source: str
    member: str
    feedback: dict[str, Any]

    @property
    def verdict(self) -> str:
        return str(self.feedback.get("verdict") or "error")


@dataclass
class Bundle:
    path: str
    sha256: str  # the whole file's
    manifest: dict[str, Any]
    experiment: dict[str, Any]
    config: dict[str, Any] | None
    grading: dict[str, Any]
    hosts: dict[str, Any]
    problems: dict[str, dict[str, Any]]  # id → index row + "source"
    attempts: list[dict[str, Any]]
    skills: dict[int, dict[str, Any]]  # skill id → index row + "text"
    implementations: list[Implementation]
    comparisons: list[dict[str, Any]]
    analysis: dict[str, Any] = field(default_factory=dict)
    interventions: list[dict[str, Any]] = field(default_factory=list)  # operators' commands

    @property
    def experiment_id(self) -> str:
        return str(self.experiment["id"])


def _member_json(members: dict[str, bytes], name: str) -> Any:
    try:
        return json.loads(members[name])
    except KeyError:
        raise BundleError("", [Problem(name, "missing from the manifest")]) from None
    except ValueError as exc:
        raise BundleError("", [Problem(name, f"not valid JSON ({exc})")]) from None


def _implementations(members: dict[str, bytes]) -> list[Implementation]:
    out: list[Implementation] = []
    for row in _member_json(members, "implementations/index.json"):
        member = str(row.get("member"))
        try:
            out.append(
                Implementation(
                    submission_id=int(row["submission_id"]),
                    attempt_id=int(row["attempt_id"]),
                    try_number=int(row["try"]),
                    purpose=str(row["purpose"]),
                    n=int(row["n"]),
                    problem_id=str(row["problem_id"]),
                    dsl=str(row["dsl"]),
                    source=members[member].decode(),
                    member=member,
                    feedback=dict(row.get("feedback") or {"verdict": row.get("verdict")}),
                )
            )
        except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
            raise BundleError(
                "", [Problem("implementations/index.json", f"entry for {member}: {exc!r}")]
            ) from None
    return out


def load_bundle(path: str | Path) -> Bundle:
    """Verify a bundle and read it; :class:`BundleError` names the member that fails."""
    manifest, members = archive.read_verified(path)
    try:
        problems = {
            str(row["id"]): {**row, "source": members[row["member"]].decode()}
            for row in _member_json(members, "problems/index.json")
        }
        skills = {
            int(row["id"]): {**row, "text": members[row["member"]].decode()}
            for row in _member_json(members, "skills/index.json")
        }
        bundle = Bundle(
            path=str(path),
            sha256=archive.sha256(Path(path).read_bytes()),
            manifest=manifest,
            experiment=_member_json(members, "experiment/experiment.json"),
            config=_member_json(members, "experiment/config.json"),
            grading=_member_json(members, "experiment/grading.json"),
            hosts=_member_json(members, "experiment/hosts.json"),
            problems=problems,
            attempts=_member_json(members, "results/attempts.json"),
            skills=skills,
            implementations=_implementations(members),
            comparisons=_member_json(members, "results/comparisons.json"),
            analysis=_member_json(members, "results/analysis.json"),
            interventions=(  # absent from bundles written before supervision
                _member_json(members, "results/interventions.json")
                if "results/interventions.json" in members
                else []
            ),
        )
    except BundleError as exc:
        raise BundleError(path, exc.problems) from None
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as exc:
        raise BundleError(path, [Problem(MANIFEST_INDEXES, f"malformed: {exc!r}")]) from None
    return bundle


MANIFEST_INDEXES = "problems/index.json or skills/index.json"
