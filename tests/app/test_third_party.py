"""Offline runs: litellm's bundled price map unless asked otherwise, and third-party warnings
in the log next to the database instead of the progress output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VAR = "LITELLM_LOCAL_MODEL_COST_MAP"
CONFIG = """\
[experiment]
name = "noisy"
problems = ["p28"]
agent = "simulated"
grading = "simulated"
max_submissions = 1
dsls = ["cute"]

[[models]]
name = "sim/a"
"""
# a simulated agent whose libraries complain, as litellm and harbor do during real runs
NOISY = """
import logging, sys, warnings
import engine.standins.simulated as sim

original = sim.SimulatedRunner.__call__

async def noisy(self, job, backend, observer):
    logging.getLogger("LiteLLM").addHandler(logging.StreamHandler())  # litellm's own
    logging.getLogger("LiteLLM").warning("LITELLM NOISE")
    logging.getLogger("harbor.trial").warning("HARBOR NOISE")
    warnings.warn("LIBRARY WARNING", stacklevel=1)
    return await original(self, job, backend, observer)

sim.SimulatedRunner.__call__ = noisy
from app.cli import main
sys.exit(main(sys.argv[1:]))
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != VAR}
    env.update(extra)
    return env


def python(code: str, *args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_the_cli_uses_litellms_bundled_price_map_unless_asked(tmp_path: Path) -> None:
    code = (
        f"import os, sys; sys.path.insert(0, {str(ROOT)!r}); from app.cli import main; "
        "main(['db', 'info', '--db', sys.argv[1]]); import litellm; "
        f"print('VALUE', os.environ[{VAR!r}])"
    )
    db = str(tmp_path / "x.sqlite")
    done = python(code, db, env=clean_env(), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "VALUE True" in done.stdout
    assert "cost map" not in done.stderr and "LiteLLM" not in done.stderr
    # a user who wants a fresh map gets it: the CLI leaves the variable as set (litellm not
    # imported here: with False it would spend seconds trying to download the map)
    keeps = code.replace("import litellm; ", "")
    asked = python(keeps, db, env=clean_env(**{VAR: "False"}), cwd=tmp_path)
    assert asked.returncode == 0, asked.stderr
    assert "VALUE False" in asked.stdout


@pytest.mark.slow
def test_third_party_warnings_go_to_the_log_not_the_progress_output(tmp_path: Path) -> None:
    config = tmp_path / "noisy.toml"
    config.write_text(CONFIG)
    db = tmp_path / "data" / "mkb.sqlite"
    done = python(
        f"import sys; sys.path.insert(0, {str(ROOT)!r})\n{NOISY}",
        "run",
        str(config),
        "--db",
        str(db),
        env=clean_env(),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    for noise in ("LITELLM NOISE", "HARBOR NOISE", "LIBRARY WARNING"):
        assert noise not in done.stderr and noise not in done.stdout
    assert "experiment noisy" in done.stdout  # the summary is still printed
    log = (db.parent / "mkb.log").read_text()
    assert all(noise in log for noise in ("LITELLM NOISE", "HARBOR NOISE", "LIBRARY WARNING"))
