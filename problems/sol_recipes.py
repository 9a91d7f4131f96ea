"""Rebuild upstream's SOL-ExecBench-derived problem files from a local copy of the dataset.

Upstream ships, for each such problem, a recipe ``problems/_sol_execbench/NN_<slug>.json``:
``subset`` and ``row`` name a dataset entry, ``layout`` is the problem text with holes
(U+E000) to fill, in order, with word/punctuation units of the entry's reference code taken
from the ``runs`` (start, length); U+E001 stands for the entry's name and U+E002 for the uuid
of workload record ``workload``; ``sha256`` is the digest of the finished text.

The dataset is read either from ``L1.parquet``/``L2.parquet``/``Quant.parquet`` (needs
pyarrow) or from SOL-ExecBench's folder layout ``[benchmark/]<subset>/<entry>/`` holding
``definition.json`` (with its ``reference`` code) and ``workload.jsonl``; there an entry's
row is its position among the subset's folders in name order.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOLE, NAME_MARK, WORKLOAD_MARK = "\ue000", "\ue001", "\ue002"
SUBSETS = ("L1", "L2", "Quant")
_UNIT = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class DatasetEntry:
    """One dataset row: its name, reference code and workload uuids in record order."""

    name: str
    reference: str
    workload_ids: tuple[str, ...]


def _subset_root(path: Path) -> Path:
    for candidate in (path, path / "benchmark", path / "SOL-ExecBench" / "benchmark"):
        if any((candidate / s).is_dir() for s in SUBSETS):
            return candidate
    raise FileNotFoundError(f"{path}: no {'/'.join(SUBSETS)} folders or parquet files")


def _from_folders(path: Path) -> dict[tuple[str, int], DatasetEntry]:
    root = _subset_root(path)
    entries: dict[tuple[str, int], DatasetEntry] = {}
    for subset in SUBSETS:
        folders = sorted(p for p in (root / subset).glob("*") if p.is_dir())
        for row, folder in enumerate(folders):
            definition = json.loads((folder / "definition.json").read_text())
            lines = (folder / "workload.jsonl").read_text().splitlines()
            ids = tuple(json.loads(line)["uuid"] for line in lines if line.strip())
            entries[(subset, row)] = DatasetEntry(
                definition.get("name", folder.name), definition["reference"], ids
            )
    return entries


def _from_parquet(path: Path) -> dict[tuple[str, int], DatasetEntry]:
    import pyarrow.parquet as pq  # optional dependency, only for the parquet form

    entries: dict[tuple[str, int], DatasetEntry] = {}
    for subset in SUBSETS:
        table = pq.read_table(
            path / f"{subset}.parquet", columns=["name", "reference", "workloads"]
        )
        rows = zip(*(table.column(c).to_pylist() for c in ("name", "reference", "workloads")))
        for row, (name, reference, workloads) in enumerate(rows):
            ids = tuple(record["uuid"] for record in json.loads(workloads))
            entries[(subset, row)] = DatasetEntry(name, reference, ids)
    return entries


def dataset_entries(path: Path) -> dict[tuple[str, int], DatasetEntry]:
    """Every entry of a local dataset copy, keyed by (subset, row)."""
    path = Path(path)
    if all((path / f"{s}.parquet").is_file() for s in SUBSETS):
        return _from_parquet(path)
    return _from_folders(path)


def fill(recipe: dict[str, Any], entry: DatasetEntry) -> str:
    """The problem text a recipe describes, filled from one dataset entry."""
    units = _UNIT.findall(entry.reference)
    pieces = [u for start, length in recipe["runs"] for u in units[start : start + length]]
    layout: str = recipe["layout"]
    if len(pieces) != layout.count(HOLE):
        raise ValueError(
            f"{recipe.get('problem')}: runs give {len(pieces)} units for "
            f"{layout.count(HOLE)} holes (a different dataset revision?)"
        )
    marks = {NAME_MARK: entry.name}
    index = int(recipe.get("workload", 0))
    if index < len(entry.workload_ids):
        marks[WORKLOAD_MARK] = entry.workload_ids[index]
    source = iter(pieces)
    return "".join(next(source) if ch == HOLE else marks.get(ch, ch) for ch in layout)


def rebuild(
    upstream_problems: Path, dataset: Path, out_dir: Path
) -> tuple[dict[str, Path], dict[str, str]]:
    """Write every recipe's problem file under ``out_dir/<category>/``.

    Returns (path by our id ``pNN``, error by id) — a recipe whose dataset entry is missing
    or whose text does not hash to the recorded digest is an error, not a file.
    """
    entries = dataset_entries(dataset)
    written: dict[str, Path] = {}
    errors: dict[str, str] = {}
    for recipe_path in sorted((Path(upstream_problems) / "_sol_execbench").glob("*.json")):
        recipe = json.loads(recipe_path.read_text(encoding="utf-8"))
        pid = f"p{recipe_path.stem[:2]}"
        entry = entries.get((recipe["subset"], int(recipe["row"])))
        if entry is None:
            errors[pid] = f"dataset has no {recipe['subset']} row {recipe['row']}"
            continue
        try:
            text = fill(recipe, entry)
        except ValueError as exc:
            errors[pid] = str(exc)
            continue
        if hashlib.sha256(text.encode("utf-8")).hexdigest() != recipe.get("sha256"):
            errors[pid] = "rebuilt text does not match the recipe's sha256 (dataset revision?)"
            continue
        target = Path(out_dir) / recipe["category"] / f"{recipe['problem']}.py"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        written[pid] = target
    return written, errors
