"""A built task's problem.py runs from the task's own files, without this project installed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.tasks.builder import build_task, vendored_problem_files
from problems import registry

# Run with -S so that no .pth file (our editable install among them) puts the repository's
# `problems` package on the path; torch's own folder is added back by hand.
CHECK = r"""
import importlib.util, json, sys
sys.path.append(sys.argv[1])
import torch
failures = {}
for folder in sys.argv[2:]:
    for name in [m for m in sys.modules if m == "problems" or m.startswith("problems.")]:
        del sys.modules[name]
    sys.path.insert(0, folder)
    try:
        spec = importlib.util.spec_from_file_location("task_problem", folder + "/problem.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from problems.spec import Workload
        inputs = module.make_inputs(1, "cpu", Workload(module.SMOKE))
        module.reference(*inputs)
        outside = [m.__file__ for n, m in sys.modules.items()
                   if n.startswith("problems") and not m.__file__.startswith(folder)]
        if outside:
            failures[folder] = f"loaded from outside the task: {outside}"
    except Exception as exc:
        failures[folder] = f"{type(exc).__name__}: {exc}"
    sys.path.remove(folder)
print(json.dumps(failures))
"""


def _write(folder: Path, source: bytes) -> None:
    (folder / "problems").mkdir(parents=True)
    (folder / "problem.py").write_bytes(source)
    (folder / "problems" / "__init__.py").write_text('"""Helpers the problem imports."""\n')
    for rel, data in vendored_problem_files(source).items():
        (folder / "problems" / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / "problems" / rel).write_bytes(data)


@pytest.mark.slow
def test_every_problem_runs_from_its_vendored_helpers_alone(tmp_path: Path) -> None:
    folders = []
    for problem in registry.catalog():
        folder = tmp_path / problem.id
        _write(folder, Path(problem.path).read_bytes())
        folders.append(str(folder))
    torch_site = str(Path(torch.__file__).resolve().parents[1])
    proc = subprocess.run([sys.executable, "-S", "-c", CHECK, torch_site, *folders],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


def test_helpers_are_followed_through_their_imports() -> None:
    source = Path(registry.get("p06").path).read_bytes()
    files = vendored_problem_files(source)
    assert {"attention/__init__.py", "attention/_gqa.py", "attention/_paged.py",
            "common.py", "spec.py", "compare.py"} <= set(files)
    assert not any(name.startswith(("moe/", "quantization/")) for name in files)


def test_a_built_task_ships_the_helpers(tmp_path: Path) -> None:
    task = build_task("p52", "cute", tmp_path)
    shipped = task.path / "environment" / "problems" / "quantization" / "_fp8.py"
    assert shipped.is_file() and (task.path / "tests" / "problems" / "quantization").is_dir()


def test_an_import_of_a_missing_helper_is_named() -> None:
    with pytest.raises(FileNotFoundError, match="problems.attention._nope"):
        vendored_problem_files(b"from problems.attention._nope import x\n")
