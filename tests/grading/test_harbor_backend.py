"""The harbor backend: configuration checks and clear errors (no Docker on this machine), and
the in-container entry point (``python -m engine.grading.parent.supervise --job-file``) it runs."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from engine.grading.api import GradeRequest
from engine.grading.backends.harbor import HarborBackend, HarborConfig, HarborConfigError
from engine.grading.options import EvalConfig
from engine.grading.parent.evaluate import make_job
from engine.grading.parent.supervise import REPO_ROOT, Limits, tagged_messages

FIXTURES = Path(__file__).parent / "fixtures"
HONEST = (FIXTURES / "honest" / "p28_plain.py").read_text()


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (HarborConfig(), "docker_image"),
        (HarborConfig(docker_image="img", gpus=0), "gpus"),
        (HarborConfig(docker_image="img", import_path="a:B"), "exactly one"),
        (HarborConfig(docker_image="img", environment_type="no-such-env"), "unknown"),
        (
            HarborConfig(docker_image="img", environment_type=None, import_path="nope.mod:Env"),
            "cannot import",
        ),
    ],
)
def test_bad_configuration_is_explained(config: HarborConfig, message: str) -> None:
    with pytest.raises(HarborConfigError, match=message):
        HarborBackend(config).validate()


async def test_unusable_environment_gives_an_error_verdict() -> None:
    backend = HarborBackend(HarborConfig(docker_image="mkb-grader:latest"))
    try:
        backend.validate()
        pytest.skip("a usable docker environment exists here")
    except HarborConfigError:
        pass
    feedback = await backend.grade(GradeRequest("p28", "cute", HONEST))
    assert feedback.verdict == "error" and "harbor backend" in feedback.message


async def test_static_rules_run_before_any_container() -> None:
    backend = HarborBackend(HarborConfig(docker_image="img"))
    cheat = (FIXTURES / "cheats" / "cuda_graph.py").read_text()
    feedback = await backend.grade(GradeRequest("p28", "cute", cheat))
    assert (feedback.verdict, feedback.reason) == ("fail", "rule.cuda_graph")


@pytest.mark.slow
def test_container_entry_point_reads_and_deletes_the_job_file(tmp_path: Path) -> None:
    job = make_job(GradeRequest("p28", "cute", HONEST), "cpu", EvalConfig(), str(tmp_path))
    job_file = tmp_path / "job.json"
    job_file.write_text(json.dumps({"job": job, "limits": asdict(Limits(timeout_s=60))}))
    out = subprocess.run(
        [sys.executable, "-m", "engine.grading.parent.supervise", "--job-file", str(job_file)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr
    assert not job_file.exists()
    messages, _ = tagged_messages(out.stdout, job["nonce"])
    assert messages[0]["kind"] == "outcome"
    assert messages[0]["data"]["result"]["verdict"] == "preview"
