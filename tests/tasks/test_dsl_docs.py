"""Built tasks carry a real API reference when the DSL is installed (make install adds both)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from engine.tasks.builder import build_task

# (page, text the page must hold): an entry point every kernel needs
EXPECTED = {
    "cute": ("cutlass.cute", "cutlass.cute.md", "## `compile"),
    "tirx": ("tvm.script.tirx", "tvm.script.tirx.md", "### `cuda.warp_sum("),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.parametrize("dsl", ["cute", "tirx"])
def test_built_task_has_generated_dsl_pages(tmp_path: Path, dsl: str) -> None:
    module, page, needle = EXPECTED[dsl]
    if not _installed(module):
        pytest.skip(f"{module} is not installed (make install adds it)")
    docs = build_task("p28", dsl, tmp_path).path / "environment" / "docs"
    assert not (docs / "MISSING.md").exists()
    assert needle in (docs / page).read_text()
    assert f"- [{page}]({page})" in (docs / "README.md").read_text()
