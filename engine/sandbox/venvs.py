"""Per-DSL Python environments for the local sandbox (``mkb sandbox prepare``).

A prepared environment is a venv at ``<root>/<dsl>/`` whose ``mkb-host.pth`` adds the host
venv's site-packages (CPU torch and the project's dependencies), with the DSL's packages
installed on top. When one exists, attempts on that DSL put its ``bin/`` first on the
sandbox PATH; otherwise the host venv's Python is used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from engine.tasks.dsls import dsl_info

DEFAULT_ROOT = Path("mkb-data") / "sandbox-venvs"


def venv_root() -> Path:
    return Path(os.environ.get("MKB_SANDBOX_VENVS") or DEFAULT_ROOT)


def venv_bin(dsl: str, root: Path | None = None) -> Path | None:
    """The prepared venv's ``bin/`` for ``dsl``, or None when none is prepared."""
    folder = (root or venv_root()) / dsl / "bin"
    return folder.resolve() if (folder / "python").exists() else None


def prepare_plan(
    dsl: str, root: Path | None = None, requirements: tuple[str, ...] | None = None
) -> list[list[str]]:
    """The commands that build the venv (the .pth file is written after the first)."""
    target = ((root or venv_root()) / dsl).resolve()
    reqs = dsl_info(dsl).requirements if requirements is None else requirements
    if not reqs:
        return [[sys.executable, "-m", "venv", "--without-pip", str(target)]]
    return [
        [sys.executable, "-m", "venv", str(target)],
        [str(target / "bin" / "python"), "-m", "pip", "install", *reqs],
    ]


def prepare(
    dsl: str,
    root: Path | None = None,
    dry_run: bool = False,
    requirements: tuple[str, ...] | None = None,
) -> Path:
    """Create (or update) the venv for ``dsl``; returns its ``bin/``.

    ``requirements`` overrides the DSL's packages (an empty tuple installs nothing).
    """
    plan = prepare_plan(dsl, root, requirements)
    target = Path(plan[0][-1])
    if dry_run:
        return target / "bin"
    subprocess.run(plan[0], check=True)
    site = Path(
        subprocess.run(
            [
                str(target / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "mkb-host.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    for command in plan[1:]:
        subprocess.run(command, check=True)
    return target / "bin"
