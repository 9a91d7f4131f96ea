"""Task variants: layout, DSL-only differences, content hashing, docs, CLI, oracle run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from attempts_support import needs_namespaces

from app.cli import main as mkb
from engine.tasks import docs
from engine.tasks.builder import build_task, staleness
from engine.tasks.dsls import dsl_info
from engine.tasks.instruction import TRANSFER_HEADER

REPO = Path(__file__).resolve().parents[2]
DSL_WORDS = {
    "cute": ("CuTe DSL", "cutlass.cute", "import cutlass; import cutlass.cute as cute"),
    "tirx": ("TIRx", "tvm.tirx", "import tvm; from tvm.script import tirx as T"),
}


def _tree(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def _neutral(text: str, dsl: str) -> str:
    name, _, hint = DSL_WORDS[dsl]
    return text.replace(hint, "<IMPORT>").replace(name, "<DSL>").replace(f'"{dsl}"', '"<dsl>"')


def test_variant_layout_and_task_toml(tmp_path: Path) -> None:
    task = build_task("p28", "cute", tmp_path)
    files = _tree(task.path)
    for name in (
        "task.toml",
        "instruction.md",
        "manifest.json",
        "environment/problem.py",
        "environment/CONTRACT.md",
        "environment/bin/submit",
        "environment/docs/README.md",
        "environment/problems/common.py",
        "tests/test.sh",
        "tests/final_eval.py",
    ):
        assert name in files, name
    assert os.access(task.path / "environment/bin/submit", os.X_OK)
    toml = (task.path / "task.toml").read_text()
    assert "timeout_sec = 2400.0" in toml and 'network_mode = "no-network"' in toml
    assert "cpus = 2" in toml and "memory_mb = 8192" in toml
    instruction = (task.path / "instruction.md").read_text()
    for section in (
        "## Deliverable",
        "## Implementation boundary",
        "## Grading",
        "## Suggested workflow",
        "## Skill",
    ):
        assert section in instruction
    assert "no code, no commands and no API instructions" in instruction
    assert (
        files["environment/problem.py"]
        == (REPO / "problems/mlp_norm")
        .joinpath("p28_fused_add_rmsnorm_h4096_llama31_8b_bf16.py")
        .read_bytes()
    )


def test_two_variants_differ_only_in_dsl_docs_and_dependencies(tmp_path: Path) -> None:
    cute = _tree(build_task("p28", "cute", tmp_path).path)
    tirx = _tree(build_task("p28", "tirx", tmp_path).path)
    differing = []
    for name in sorted(set(cute) | set(tirx)):
        if name.startswith("environment/docs/") or name == "manifest.json":
            continue  # the DSL's docs and the build record
        a, b = cute.get(name), tirx.get(name)
        assert a is not None and b is not None, f"{name} exists in one variant only"
        if a == b:
            continue
        differing.append(name)
        if name == "environment/Dockerfile":
            strip = [line for line in a.decode().splitlines() if "pip install" not in line]
            assert strip == [l for l in b.decode().splitlines() if "pip install" not in l]
            continue
        assert _neutral(a.decode(), "cute") == _neutral(b.decode(), "tirx"), name
    assert set(differing) == {
        "instruction.md",
        "task.toml",
        "environment/CONTRACT.md",
        "environment/Dockerfile",
    }


def test_hash_detects_stale_and_edited_builds(tmp_path: Path, monkeypatch) -> None:
    task = build_task("p28", "tirx", tmp_path)
    assert staleness(task.path) == []
    again = build_task("p28", "tirx", tmp_path)
    assert again.inputs_sha256 == task.inputs_sha256  # deterministic
    other = build_task("p28", "tirx", tmp_path, name="b", budget_s=600)
    assert other.inputs_sha256 != task.inputs_sha256
    (task.path / "environment/CONTRACT.md").write_text("edited")
    assert any("files edited" in r for r in staleness(task.path))
    task = build_task("p28", "tirx", tmp_path)
    monkeypatch.setattr("engine.tasks.builder.BUILDER_VERSION", "999")
    assert any("inputs changed" in r for r in staleness(task.path))


def test_transferred_skill_is_appended_verbatim(tmp_path: Path) -> None:
    skill = "# Notes\n\n- Float32 accumulation verified: 2/2 draws.\n  odd  spacing kept\n"
    task = build_task("p28", "tirx", tmp_path, source_skill=skill, source_dsl="cute")
    text = (task.path / "instruction.md").read_text()
    assert text.endswith(skill)
    assert TRANSFER_HEADER in text and "CuTe DSL instead of TIRx" in text
    solo = (build_task("p28", "tirx", tmp_path, name="solo").path / "instruction.md").read_text()
    assert text.startswith(solo.rstrip())
    assert staleness(task.path) == []


def test_docs_placeholder_and_introspection(tmp_path: Path, monkeypatch) -> None:
    summary = docs.build_docs(dsl_info("cute"), tmp_path / "missing")
    if summary["version"] is None:
        page = (tmp_path / "missing" / "MISSING.md").read_text()
        assert "nvidia-cutlass-dsl" in page
    fake = types.ModuleType("mkb_fake_dsl")
    fake.__doc__ = "A stand-in DSL."

    def launch(grid: int, block: int = 128) -> None:
        """Launch a kernel."""

    class Tensor:
        """A tensor view."""

        def tile(self, shape: tuple) -> Tensor:
            """Tile it."""
            return self

    fake.launch, fake.Tensor = launch, Tensor
    monkeypatch.setitem(sys.modules, "mkb_fake_dsl", fake)
    summary = docs.build_docs(
        dsl_info("cute"), tmp_path / "gen", modules=("mkb_fake_dsl", "nope_x")
    )
    page = (tmp_path / "gen" / "mkb_fake_dsl.md").read_text()
    assert "## `launch(grid: 'int', block: 'int' = 128) -> 'None'`" in page
    assert "Launch a kernel." in page and "A stand-in DSL." in page
    assert "### `Tensor.tile(self, shape: 'tuple')" in page and "Tile it." in page
    assert "nope_x" in summary["failed"]


def test_cli_build_and_check(tmp_path: Path, capsys) -> None:
    out = tmp_path / "tasks"
    assert mkb(["tasks", "build", "p28", "--dsl", "tirx", "--out", str(out)]) == 0
    assert (out / "p28-tirx" / "task.toml").is_file() and not (out / "p28-cute").exists()
    assert mkb(["tasks", "check", str(out / "p28-tirx")]) == 0
    (out / "p28-tirx" / "instruction.md").write_text("changed")
    assert mkb(["tasks", "check", str(out / "p28-tirx")]) == 1
    assert mkb(["tasks", "build", "p99", "--out", str(out)]) == 2
    assert "up to date" in capsys.readouterr().out


@needs_namespaces
@pytest.mark.slow
def test_plain_harbor_run_with_the_oracle(tmp_path: Path, p28_solution: str) -> None:
    task = build_task("p28", "cute", tmp_path / "tasks", solution_source=p28_solution)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "HARBOR_TELEMETRY": "0",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "MKB_SANDBOX_ROOT": str(tmp_path),
    }
    harbor = Path(sys.executable).parent / "harbor"
    proc = subprocess.run(
        [
            str(harbor),
            "run",
            "-p",
            str(task.path),
            "-a",
            "oracle",
            "-e",
            "engine.sandbox.local_ns:LocalNamespaceEnvironment",
            "-o",
            str(tmp_path / "jobs"),
            "--job-name",
            "oracle",
            "-q",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rewards = list((tmp_path / "jobs" / "oracle").glob("*/verifier/reward.json"))
    assert len(rewards) == 1
    assert json.loads(rewards[0].read_text()) == {"reward": 0.0, "preview_correct": 1.0}
    stdout = rewards[0].with_name("test-stdout.txt").read_text()
    assert "PREVIEW" in stdout and "never a scored pass" in stdout
