"""The Dockerfiles in docker/ agree with the code that builds tasks and grades (no engine here).

What can be checked without building: pinned packages match engine/tasks/dsls.py and
pyproject.toml, every COPY source exists, the paths the tasks expect exist in the image, and
the offline-docs step runs from exactly the files the sandbox image copies.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from engine.tasks.dsls import DSLS
from engine.tasks.instruction import WORKDIR
from engine.tasks.submit_script import MAILBOX

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"


def instructions(path: Path) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction, continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, rest = line.partition(" ")
            out.append((keyword.upper(), rest.strip()))
    return out


def copy_sources(path: Path) -> list[str]:
    sources = []
    for keyword, rest in instructions(path):
        if keyword == "COPY":
            sources += [s for s in shlex.split(rest)[:-1] if not s.startswith("--")]
    return sources


def torch_pin() -> str:
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    return next(d.split("==")[1] for d in deps if d.startswith("torch=="))


@pytest.mark.parametrize("dsl", sorted(DSLS))
def test_sandbox_image_pins_its_dsl_only(dsl: str) -> None:
    path = DOCKER / f"sandbox-{dsl}.Dockerfile"
    text = path.read_text()
    for requirement in DSLS[dsl].requirements:
        assert f'"{requirement}"' in text, requirement
    for other in set(DSLS) - {dsl}:
        for requirement in DSLS[other].requirements:
            assert requirement not in text, f"{path.name} installs {other}'s {requirement}"
    args = dict(rest.split("=", 1) for kw, rest in instructions(path) if kw == "ARG")
    assert args["TORCH_VERSION"] == torch_pin()
    assert args["TORCH_INDEX"].endswith("/cpu")  # sandboxes are CPU-only


@pytest.mark.parametrize("dsl", sorted(DSLS))
def test_sandbox_image_has_the_task_paths(dsl: str) -> None:
    steps = instructions(DOCKER / f"sandbox-{dsl}.Dockerfile")
    assert [s for s in steps if s[0] == "WORKDIR"][-1] == ("WORKDIR", WORKDIR)
    runs = " ".join(rest for kw, rest in steps if kw == "RUN")
    assert MAILBOX in runs and "tmux" in runs
    assert f"MKB_DSL={dsl}" in " ".join(rest for kw, rest in steps if kw == "ENV")


@pytest.mark.parametrize("name", ["sandbox-cute", "sandbox-tirx", "grader"])
def test_copy_sources_exist(name: str) -> None:
    sources = copy_sources(DOCKER / f"{name}.Dockerfile")
    assert sources
    for source in sources:
        assert (REPO / source).exists(), f"{name}.Dockerfile copies missing {source}"


def test_grader_image_pins_both_dsls_and_serves() -> None:
    path = DOCKER / "grader.Dockerfile"
    text = path.read_text()
    for info in DSLS.values():
        for requirement in info.requirements:
            assert f'"{requirement}"' in text, requirement
    steps = instructions(path)
    args = dict(rest.split("=", 1) for kw, rest in steps if kw == "ARG")
    assert args["TORCH_VERSION"] == torch_pin()
    entry = [rest for kw, rest in steps if kw == "ENTRYPOINT"][-1]
    assert entry.startswith('["mkb", "grader", "serve"')
    assert "CUDA_PATH=" in " ".join(rest for kw, rest in steps if kw == "ENV")


@pytest.mark.slow
@pytest.mark.parametrize("dsl", sorted(DSLS))
def test_docs_step_runs_from_the_copied_files_alone(dsl: str, tmp_path: Path) -> None:
    path = DOCKER / f"sandbox-{dsl}.Dockerfile"
    root = tmp_path / "opt-mkb"
    for source in copy_sources(path):
        target = root / source
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes((REPO / source).read_bytes())
    run = next(rest for kw, rest in instructions(path) if kw == "RUN" and "build_docs" in rest)
    code = re.search(r'python -c "(.*?)"', run, re.S)
    assert code is not None
    snippet = code.group(1).replace("/opt/mkb/docs", str(tmp_path / "docs"))
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, '.'); {snippet}"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "docs" / dsl / "README.md").is_file()
