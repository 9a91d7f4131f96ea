"""In the runner: unpack this source's compiled modules from an earlier grading into the
runner's own workdir, where the DSL's on-disk cache looks (``judge/compile_cache.py``)."""

from __future__ import annotations

import os
import tarfile

COMPILE_DIR = ".mkb-compile"  # relative to the workdir (the runner's current directory)


def unpack(fd: int, folder: str = COMPILE_DIR) -> None:
    """Extract the archive on ``fd`` (a private copy) under ``folder``; plain files only."""
    os.makedirs(folder, exist_ok=True)
    with os.fdopen(fd, "rb") as fh, tarfile.open(fileobj=fh, mode="r:") as tar:
        tar.extractall(folder, filter="data")
