"""Compiled DSL modules kept per source: one grading of a source compiles, later ones reuse.

A DSL kernel is compiled by the submission's own code (``cute.compile``, ``tvm.compile``) in
its runner, so no trusted process can compile it instead. What can be kept is what the DSL's
own on-disk cache writes (CuTe's file cache, pointed into the runner's workdir at
``<workdir>/.mkb-compile``) — and kept only for the same source:

* the key is the sha256 of the source, the DSL, the device, the toolchain's versions and the
  host (:func:`entry_key`): another source, DSL, GPU kind or toolchain never finds the entry;
* an entry is written by the trusted judge only, after a *jailed* grading that passed and after
  its runner is dead: regular files of that workdir folder, never followed through a link,
  never a file with other names (hard links), at most 32 MiB an entry and 8 GiB in all
  (:func:`harvest`; entries are never removed: delete the folder to reclaim the space);
* it lies outside every jail (``$MKB_COMPILE_CACHE``, a folder; off when unset), is
  written once (a folder renamed into place; a second writer's copy is dropped) and its
  archive's sha256 is checked on every load (:func:`deliver`);
* a runner receives a private copy (a memfd of the archive) at its import, unpacked into its
  own fresh workdir: it can change its copy, never the entry.

So an entry holds nothing but what a runner of the same source wrote, and reaches only
runners of that same source (docs/grading.md, "Compile once per source").
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shutil
import stat
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

from engine.grading.runner.compiled import COMPILE_DIR

RUNNER_DIR = COMPILE_DIR  # where a runner's DSL caches write, in its workdir
ENV_ROOT = "MKB_COMPILE_CACHE"  # a folder turns it on; unset, empty or "off": off
ARCHIVE = "entry.tar"
DIGEST = "entry.sha256"
MAX_BYTES = 32 * 2**20  # one entry (a CuTe kernel's cache file is a few hundred kB)
MAX_FILES = 4096
MAX_TOTAL_BYTES = 8 * 2**30  # all entries: past it, nothing more is kept
TOOLCHAIN = ("torch", "nvidia-cutlass-dsl", "apache-tvm", "tvm", "tvm-ffi", "apache-tvm-ffi")


def cache_root() -> Path | None:
    """Where entries are kept, or None when the cache is off (the default: whether the DSLs'
    caches load back correctly in a jailed GPU runner is not measured yet, and a kept entry
    that failed to load would fail a grading for the grader's reason)."""
    value = os.environ.get(ENV_ROOT, "")
    if value.lower() in ("", "off", "0", "none"):
        return None
    return Path(value)


def toolchain() -> dict[str, str]:
    """The versions a compiled module depends on (absent packages named as such)."""
    found = {"python": platform.python_version(), "host": platform.node()}
    for name in TOOLCHAIN:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def entry_key(source: str, dsl: str, device: str, tools: dict[str, str]) -> str:
    """The entry's name: nothing but the same source, DSL, device and toolchain finds it."""
    digest = hashlib.sha256(source.encode()).hexdigest()
    payload = json.dumps([digest, dsl, device, sorted(tools.items())])
    return hashlib.sha256(payload.encode()).hexdigest()


def deliver(root: Path, key: str) -> int | None:
    """A memfd holding the entry's archive, or None (no entry, or one that fails its hash)."""
    folder = root / key
    try:
        data = (folder / ARCHIVE).read_bytes()
        expected = (folder / DIGEST).read_text().strip()
    except OSError:
        return None
    if hashlib.sha256(data).hexdigest() != expected:
        return None
    fd = os.memfd_create("mkb-compiled")
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _regular_files(folder: Path) -> list[tuple[str, bytes]] | None:
    """(relative name, bytes) of the regular files under ``folder``, links never followed;
    None when over the bounds."""
    found: list[tuple[str, bytes]] = []
    total = 0
    for top, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(top, d))]
        for name in files:
            path = os.path.join(top, name)
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            except OSError:
                continue  # a link, or gone
            with os.fdopen(fd, "rb") as fh:
                info = os.fstat(fh.fileno())
                if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
                    continue  # a FIFO, a device, a file with another name elsewhere
                total += info.st_size
                if total > MAX_BYTES or len(found) >= MAX_FILES:
                    return None
                found.append((os.path.relpath(path, folder), fh.read(MAX_BYTES)))
    return found


def kept_bytes(root: Path) -> int:
    """The size of every entry's archive under ``root``."""
    total = 0
    if root.is_dir():
        for entry in os.scandir(root):
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(entry.path, ARCHIVE)).st_size
    return total


def harvest(root: Path, key: str, folder: Path) -> bool:
    """Keep what a dead runner's DSL caches wrote under ``folder`` as the entry ``key``
    (only if there is none yet); whether an entry was written."""
    if (root / key).exists() or not folder.is_dir() or folder.is_symlink():
        return False
    files = _regular_files(folder)
    if not files or kept_bytes(root) + sum(len(data) for _, data in files) > MAX_TOTAL_BYTES:
        return False
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in sorted(files):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    archive = buffer.getvalue()
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
    try:
        (staging / ARCHIVE).write_bytes(archive)
        (staging / DIGEST).write_text(hashlib.sha256(archive).hexdigest() + "\n")
        os.rename(staging, root / key)  # atomic; fails if another grading wrote it first
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        return False
    return True
