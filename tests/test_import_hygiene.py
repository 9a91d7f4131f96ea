"""The headless core (engine, storage, problems) never imports Textual."""

from __future__ import annotations

import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _modules(package: str) -> list[str]:
    return [
        info.name
        for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}.")
        if not info.name.split(".")[-1].startswith("test")
        # reference solutions are submissions for a GPU host with the DSLs, not core modules
        and not info.name.startswith("problems.solutions")
    ]


@pytest.mark.slow
def test_headless_packages_do_not_load_textual() -> None:
    modules = [m for pkg in ("engine", "storage", "problems") for m in _modules(pkg)]
    assert "storage.db" in modules and "problems.registry" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"textual imported: {result.stdout} {result.stderr[-2000:]}"


def test_import_linter_contract_is_configured() -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert 'source_modules = ["engine", "storage", "problems"]' in text
    assert '"textual"' in text
