"""The stored memory plans (problems/memory_store.py) and the tracer's data-dependent cases.

A stored entry is used only while it matches the problem's files (a stale or missing one is
traced instead); the committed store covers the catalog; the grading backend reads it without
importing torch. The tracer answers a generator's accept-or-redraw checks on meta tensors and
turns a real boolean mask into the indices it selects (problems/memory.py): run here at smoke
scale with a tiny real-tensor limit, so that the large-tensor paths are the ones taken."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import problems.memory as memory
from problems.memory_store import (
    entry_record,
    problem_hash,
    stored_entry,
    stored_plan,
    write_entries,
)
from problems.registry import get, problem_files


def _store(tmp_path: Path, pid: str, sizes: memory.DrawSizes, path: Path | None = None) -> Path:
    store = tmp_path / "plans.json"
    problem = get(pid)
    write_entries({(pid, "smoke"): entry_record(path or problem.path, sizes, 1e9, "")}, store)
    return store


def test_a_stored_plan_is_used_while_it_matches_and_never_once_stale(tmp_path: Path) -> None:
    problem = get("p28")
    huge = memory.DrawSizes(1e12, 0.0, [8e12], [1e12], 1.0, 1.0, 1.0, 1.0, 1)
    store = _store(tmp_path, "p28", huge)
    entry = stored_entry(problem.path, "p28", "smoke", store)
    assert entry is not None and entry.sizes == huge
    plan = stored_plan("p28", "smoke", 80e9, store)
    assert plan is not None and plan.method == "stored" and (plan.total_bytes or 0) > 1e12
    assert stored_entry(problem.path, "p28", "full", store) is None  # not stored: traced
    data = json.loads(store.read_text())
    data["entries"]["p28/smoke"]["hash"] = "0" * 64  # the problem changed since
    store.write_text(json.dumps(data))
    assert stored_entry(problem.path, "p28", "smoke", store) is None
    assert stored_plan("p28", "smoke", 80e9, store) is None


def test_the_hash_follows_the_problem_file_and_its_family_modules(tmp_path: Path) -> None:
    source = get("p19").path
    family = tmp_path / source.parent.name
    family.mkdir()
    copy = family / source.name
    shutil.copy(source, copy)
    first = problem_hash(copy)
    (family / "_shared.py").write_text("X = 1\n")
    second = problem_hash(copy)
    copy.write_text(copy.read_text() + "\n# edited\n")
    assert len({first, second, problem_hash(copy)}) == 3
    assert stored_entry(copy, "p19", "smoke") is None  # outside the catalog: always traced


def test_the_committed_store_covers_the_catalog_at_both_scales() -> None:
    stale = [
        f"{path.stem[:3]}/{scale}"
        for path in problem_files()
        for scale in ("full", "smoke")
        if stored_entry(path, path.stem[:3], scale) is None
    ]
    assert stale == [], f"run `mkb problems memory --write-plans {' '.join(stale)}`"


def test_admission_reads_the_store_without_importing_torch_or_tracing() -> None:
    code = (
        "import sys\n"
        "from engine.grading.backends.card_memory import planned\n"
        "plan = planned('p34', 'full', 80e9)\n"
        "print(plan.method, plan.anchor, 'torch' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    assert out == ["stored", "host", "False"]


@pytest.mark.parametrize("pid", ["p18", "p19", "p47", "p56"])
def test_data_dependent_problems_trace_with_large_tensors_on_meta(
    pid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    problem = get(pid)
    inputs = problem.make_inputs(0, "cpu", "smoke")
    out = problem.reference(*[x.clone() if isinstance(x, torch.Tensor) else x for x in inputs])
    monkeypatch.setattr(memory, "REAL_LIMIT_BYTES", 4096)  # smoke tensors take the meta path
    sizes = memory.draw_sizes(problem, "smoke")
    assert sizes.inputs == sum(memory._storage_bytes(inputs))
    assert sizes.outputs == sum(memory._storage_bytes(out))
    assert sizes.reference_peak >= sizes.outputs
    assert sizes.assumed == {"p18": 2, "p19": 0, "p47": 1, "p56": 2}[pid]
