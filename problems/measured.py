"""Measured full-scale figures shipped with the catalog (eager and anchor times per problem).

``problems/measured.json`` is written from a ``benchmarks/catalog_full_scale.py`` run on a GPU
(see docs/catalog.md); ``mkb problems show`` prints the entry of a problem when one exists.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

MEASURED_FILE = Path(__file__).resolve().parent / "measured.json"


@lru_cache(maxsize=1)
def _load() -> dict[str, Any]:
    try:
        return json.loads(MEASURED_FILE.read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    except (OSError, json.JSONDecodeError):
        return {}


def measured(problem_id: str) -> dict[str, Any] | None:
    """The recorded figures for ``problem_id`` with the device they came from, or None."""
    data = _load()
    row = data.get("problems", {}).get(problem_id)
    if row is None:
        return None
    return {**row, "device": data.get("device", "?"), "measured_on": data.get("measured_on", "")}
