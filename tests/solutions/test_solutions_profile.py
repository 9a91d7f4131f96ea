"""benchmarks/solutions_profile.py measures a submission and eager in one plain process."""

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
def test_profile_rows_on_cpu(tmp_path: Path) -> None:
    honest = tmp_path / "p28_cute.py"
    shutil.copy(PLAIN, honest)
    broken = tmp_path / "p28_tirx.py"
    broken.write_text("def solve(*args):\n    raise RuntimeError('no kernel')\n")
    out = tmp_path / "rows.jsonl"
    proc = subprocess.run(
        [
            sys.executable,
            "benchmarks/solutions_profile.py",
            str(out),
            str(honest),
            str(broken),
            "--device",
            "cpu",
            "--calls",
            "3",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stderr  # the broken file fails the batch
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    good, bad = rows
    assert good["problem"] == "p28" and good["dsl"] == "cute" and good["scale"] == "smoke"
    for side in ("eager", "solution"):
        assert 0 < good[side]["host_us"] <= good[side]["e2e_us"] * 1.01
        assert good[side]["device_us"] is None  # no GPU: no kernel time
    assert good["speedup"] == round(good["eager"]["e2e_us"] / good["solution"]["e2e_us"], 3)
    assert good["sol_us"] > 0 and good["pct_sol"] >= 0
    assert "no kernel" in bad["error"]
