"""benchmarks/solution_quick_gpu.py: a new solution's first run, one child per file under a
time limit (dry run on the CPU: smoke correctness only)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLAIN = REPO / "tests/grading/fixtures/honest/p28_plain.py"


@pytest.mark.slow
def test_right_wrong_and_hanging_files_each_get_their_row(tmp_path: Path) -> None:
    right = tmp_path / "p28_cute.py"
    shutil.copy(PLAIN, right)
    wrong = tmp_path / "p28_tirx.py"
    wrong.write_text(
        "import torch\n\ndef solve(hidden_states, residual, weight):\n"
        "    return torch.zeros_like(hidden_states)\n"
    )
    hangs = tmp_path / "p36_cute.py"
    hangs.write_text("def solve(*args):\n    while True:\n        pass\n")
    out = tmp_path / "quick.jsonl"

    def quick(*files: Path, timeout_s: float) -> None:
        proc = subprocess.run(
            [sys.executable, "benchmarks/solution_quick_gpu.py", str(out), *map(str, files)]
            + ["--device", "cpu", "--timeout-s", str(timeout_s)],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert proc.returncode == 0, proc.stderr

    quick(right, wrong, timeout_s=120)
    quick(hangs, timeout_s=4)  # the child is killed at its limit, and the batch goes on
    rows = {r["file"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["p28_cute.py"]["smoke"]["ok"] is True
    assert rows["p28_tirx.py"]["smoke"]["ok"] is False
    leaf = rows["p28_tirx.py"]["smoke"]["leaves"][0]
    assert leaf["max_error"] > leaf["allowance"] > 0
    assert rows["p36_cute.py"] == {"file": "p36_cute.py", "timeout_s": 4.0}
