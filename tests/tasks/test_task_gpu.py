"""``mkb tasks build --gpu``: the grading GPU's architecture in every file of a built task
(instruction, task.toml metadata, manifest, compile_check's default, docs and launch guide),
and a build for another GPU reported stale."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from app.cli import main as mkb
from engine.tasks import guides

ARCH_RE = re.compile(r"sm_\d+a")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """p52 built for the B200 and the H200 (CuTe), and for the B200 in TIRx."""
    root = tmp_path_factory.mktemp("gpu-tasks")
    out: dict[str, Path] = {}
    for gpu, dsl in (("b200", "cute"), ("h200", "cute"), ("b200", "tirx")):
        args = ["tasks", "build", "p52", "--dsl", dsl, "--gpu", gpu, "--out", str(root / gpu)]
        assert mkb(args) == 0
        out[f"{gpu}-{dsl}"] = root / gpu / f"p52-{dsl}"
    return out


@pytest.mark.parametrize(
    ("key", "arch", "name"),
    [("b200-cute", "sm_100a", "NVIDIA B200"), ("h200-cute", "sm_90a", "NVIDIA H200")],
)
def test_every_file_names_the_grading_gpus_arch(
    built: dict[str, Path], key: str, arch: str, name: str
) -> None:
    task = built[key]
    instruction = (task / "instruction.md").read_text()
    assert set(ARCH_RE.findall(instruction)) == {arch}
    assert f"The grading GPU is an {name}" in instruction
    metadata = tomllib.loads((task / "task.toml").read_text())["metadata"]
    assert (metadata["gpu"], metadata["arch"], metadata["gpu_name"]) == (key[:4], arch, name)
    manifest = json.loads((task / "manifest.json").read_text())
    assert (manifest["gpu"], manifest["arch"]) == (key[:4], arch)
    script = (task / "environment/bin/compile_check").read_text()
    assert f'parser.add_argument("--arch", default="{arch}",' in script
    docs = task / "environment/docs"
    assert f"compile for `{arch}`" in (docs / "README.md").read_text()
    feature_page = "tcgen05" if arch == "sm_100a" else "warpgroup"
    other_page = "warpgroup" if arch == "sm_100a" else "tcgen05"
    assert (docs / f"cutlass.cute.nvgpu.{feature_page}.md").is_file()
    assert not (docs / f"cutlass.cute.nvgpu.{other_page}.md").exists()
    assert f"The grading GPU of this task is an {name}" in (docs / "launch.md").read_text()


def test_the_tirx_launch_guide_compiles_for_the_grading_arch(built: dict[str, Path]) -> None:
    guide = (built["b200-tirx"] / "environment/docs/launch.md").read_text()
    assert '"arch": "sm_100a"})  # the grader\'s NVIDIA B200' in guide
    assert "sm_90a" not in guide


def test_a_build_for_another_gpu_is_stale_and_hashes_differ(
    built: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    hashes = {
        k: json.loads((p / "manifest.json").read_text())["inputs_sha256"] for k, p in built.items()
    }
    assert len(set(hashes.values())) == 3
    assert mkb(["tasks", "check", str(built["b200-cute"]), str(built["h200-cute"])]) == 0
    capsys.readouterr()
    assert mkb(["tasks", "check", "--gpu", "b200", str(built["b200-cute"])]) == 0
    assert mkb(["tasks", "check", "--gpu", "b200", str(built["h200-cute"])]) == 1
    out = capsys.readouterr().out
    assert "STALE: built for NVIDIA H200 (Hopper, sm_90a), not the grading GPU NVIDIA B200" in out


def test_guide_pages_about_one_arch_go_only_to_its_tasks(tmp_path: Path) -> None:
    folder = guides.cache_dir("cute", tmp_path / "cache")
    for page in guides.GUIDE_SETS["cute"].pages:
        (folder / page).parent.mkdir(parents=True, exist_ok=True)
        (folder / page).write_text(page)
    blackwell = guides.copy_guides("cute", tmp_path / "b", tmp_path / "cache", arch="sm_100a")
    hopper = guides.copy_guides("cute", tmp_path / "h", tmp_path / "cache", arch="sm_90a")
    assert "guides/mma/tcgen05_programming.rst" in blackwell["pages"]  # type: ignore[operator]
    assert "guides/mma/wgmma_programming.rst" not in blackwell["pages"]  # type: ignore[operator]
    assert "guides/mma/wgmma_programming.rst" in hopper["pages"]  # type: ignore[operator]
    assert not (tmp_path / "h/guides/mma/tcgen05_programming.rst").exists()
    assert blackwell["missing"] == hopper["missing"] == []
