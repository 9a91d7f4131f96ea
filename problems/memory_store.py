"""The stored memory plans: each problem's traced draw sizes, computed once per catalog version.

Tracing a plan imports torch and runs a problem's generator and reference under the tracer
(seconds to a minute, :mod:`problems.memory`), so a grading never does it: ``mkb problems
memory --write-plans`` traces every problem at both scales and writes
:data:`STORE_PATH` (committed), one entry per problem and scale, keyed by the SHA-256 of the
files the trace depends on (:func:`problem_hash`: the problem's file, ``problems/common.py``
and its family folder's shared modules) and :data:`MODEL_VERSION`. A lookup
(:func:`stored_entry`) imports no torch; an entry whose hash no longer matches (a problem
edited since), or a missing one, is not used: the caller traces instead.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from problems.memory_model import DrawSizes, MemoryPlan, measured_plan, placed_plan

CATALOG_ROOT = Path(__file__).resolve().parent
STORE_PATH = CATALOG_ROOT / "memory_plans.json"
# bumped when the tracer changes what it measures (then every entry is stale)
MODEL_VERSION = 1


@dataclass(frozen=True)
class StoredEntry:
    """One problem's stored trace at one scale: its sizes, or why it could not be traced."""

    sizes: DrawSizes | None
    flops: float | None  # one reference run's FLOPs (the host anchor's time estimate)
    error: str = ""


def dependencies(path: Path) -> list[Path]:
    """The files a catalog problem's trace depends on: its own file, ``problems/common.py``
    and the shared modules of its family folder (``_*.py``, ``__init__.py``)."""
    shared = sorted(p for p in path.parent.glob("*.py") if p.name.startswith("_"))
    return [path, CATALOG_ROOT / "common.py", *shared]


def problem_hash(path: Path) -> str:
    """The SHA-256 of the files :func:`dependencies` names (and the model's version)."""
    digest = hashlib.sha256(f"memory-model-{MODEL_VERSION}\n".encode())
    for dep in dependencies(path):
        name = dep.name if dep.parent == CATALOG_ROOT else f"{dep.parent.name}/{dep.name}"
        digest.update(name.encode() + b"\0")
        digest.update(dep.read_bytes() + b"\0")
    return digest.hexdigest()


def _key(problem_id: str, scale: str) -> str:
    return f"{problem_id}/{scale}"


@lru_cache(maxsize=4)
def _load(path: Path, mtime_ns: int) -> dict[str, Any]:
    """The store's entries (none when the file is missing or unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != MODEL_VERSION:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def load_entries(path: Path = STORE_PATH) -> dict[str, Any]:
    try:
        mtime = path.stat().st_mtime_ns
    except OSError:
        return {}
    return _load(path, mtime)


def stored_entry(
    problem_path: Path, problem_id: str, scale: str, store: Path = STORE_PATH
) -> StoredEntry | None:
    """The stored entry of a catalog problem at ``scale`` when it matches the problem's files
    now; None when there is none, it is stale or malformed, or the problem is not in the
    catalog."""
    path = Path(problem_path).resolve()
    if not path.is_relative_to(CATALOG_ROOT) or not path.is_file():
        return None
    raw = load_entries(store).get(_key(problem_id, scale))
    if not isinstance(raw, dict) or raw.get("hash") != problem_hash(path):
        return None
    try:
        sizes = None if raw.get("sizes") is None else DrawSizes.from_dict(raw["sizes"])
        flops = None if raw.get("flops") is None else float(raw["flops"])
    except (KeyError, TypeError, ValueError):
        return None
    error = str(raw.get("error") or "")
    if sizes is None and not error:
        return None
    return StoredEntry(sizes, flops, error)


def entry_record(
    path: Path, sizes: DrawSizes | None, flops: float | None, error: str
) -> dict[str, Any]:
    """One entry as :func:`write_entries` stores it."""
    return {
        "hash": problem_hash(Path(path).resolve()),
        "sizes": None if sizes is None else sizes.as_dict(),
        "flops": flops,
        "error": error or None,
    }


def write_entries(records: dict[tuple[str, str], dict[str, Any]], path: Path = STORE_PATH) -> int:
    """Merge ``records`` (keyed by (problem id, scale)) into the store; returns its size."""
    entries = dict(load_entries(path))
    entries.update({_key(pid, scale): rec for (pid, scale), rec in records.items()})
    ordered = dict(sorted(entries.items(), key=lambda kv: (kv[0].split("/")[1], kv[0])))
    text = json.dumps({"version": MODEL_VERSION, "entries": ordered}, indent=1, sort_keys=False)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text + "\n")
    tmp.replace(path)
    return len(ordered)


def catalog_path(problem_id: str) -> Path | None:
    """The catalog file of ``problem_id`` found from file names (no problem imported)."""
    from problems.registry import problem_files

    for path in problem_files():
        if path.stem.split("_", 1)[0] == problem_id:
            return path
    return None


def stored_plan(
    problem_id: str, scale: str, capacity: float | None, store: Path = STORE_PATH
) -> MemoryPlan | None:
    """The plan of catalog problem ``problem_id`` on a card of ``capacity`` bytes from its
    stored entry, without importing torch or the problem; None when the entry is missing or
    stale (the caller traces)."""
    path = catalog_path(problem_id)
    entry = None if path is None else stored_entry(path, problem_id, scale, store)
    if entry is None:
        return None
    if entry.sizes is None:
        return measured_plan(problem_id, scale, entry.error)
    return placed_plan(entry.sizes, capacity, entry.flops, method="stored")
