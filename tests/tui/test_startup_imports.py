"""What the TUI imports before its first frame (first paint ≤ 1 s, benchmarks/first_paint.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("scipy.stats", "torch", "cutlass", "tvm", "litellm", "harbor")


def test_the_tui_module_leaves_heavy_packages_for_later() -> None:
    code = f"import sys, app.tui; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == []  # scipy.stats alone cost ~0.6 s of the first paint
