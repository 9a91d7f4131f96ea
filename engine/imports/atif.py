"""A Harbor agent trajectory (ATIF, ``agent/trajectory.json``: ``harbor.models.trajectories``)
as ``trajectory_steps`` rows, each mapped by :func:`engine.recording.step_fields` (the same
mapping live attempts use)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from engine.imports.report import ImportReport
from engine.recording import step_fields


def trajectory_steps(path: Path, report: ImportReport) -> list[dict[str, Any]]:
    """The trajectory's steps (empty when the file is absent; unreadable ones reported)."""
    if not path.is_file():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        report.not_understood(str(path), f"unreadable trajectory: {exc}")
        return []
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        report.not_understood(str(path), "not an ATIF trajectory (no steps list)")
        return []
    out: list[dict[str, Any]] = []
    for i, step in enumerate(steps, start=1):
        if not isinstance(step, dict):
            report.not_understood(f"{path}#steps[{i - 1}]", "a step that is not an object")
            continue
        index = step.get("step_id")
        out.append({**step_fields(step), "step_index": index if isinstance(index, int) else i})
    if isinstance(data.get("subagent_trajectories"), list) and data["subagent_trajectories"]:
        report.aside(
            "embedded subagent trajectory (only the main agent's steps are kept)", str(path)
        )
    if out:
        report.count("trajectory steps", len(out))
    return out
