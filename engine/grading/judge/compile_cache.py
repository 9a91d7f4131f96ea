"""Compiled DSL modules kept per source: one grading of a source compiles, later ones reuse.

A DSL kernel is compiled by the submission's own code (``cute.compile``, ``tvm.compile``) in
its runner, so no trusted process can compile it instead. The runner's own code wraps the
DSL's compile before the submission is imported (``runner/compiled.py``): TIRx's
``tvm.tirx.build`` exports the library it built, CuTe's file cache writes its MLIR bytecode,
each under ``<workdir>/.mkb-compile`` with a tag (HMAC under a key this grading's judge made
and sent with ``load``). What is kept, and for whom:

* the key is the sha256 of the source, the DSL, the device, the toolchain's versions and the
  host (:func:`entry_key`): another source, DSL, GPU kind or toolchain never finds the entry;
* an entry is written by the trusted judge only, after a *jailed* grading that passed and after
  its runner is dead: regular files of that workdir folder whose tag matches (a file the
  submission wrote there has none), never followed through a link, never a file with other
  names (hard links), at most 32 MiB an entry and 8 GiB in all (:func:`harvest`; entries are
  never removed: delete the folder to reclaim the space);
* it lies outside every jail (:func:`cache_root`: ``$MKB_COMPILE_CACHE``, else
  ``~/.cache/metakernelbench/compile`` of the grader's user; ``off`` turns it off), is written
  once (a folder renamed into place; a second writer's copy is dropped) and its archive's
  sha256 is checked on every load (:func:`deliver`);
* a runner receives a private copy (a memfd of the archive) at its import and reads it into
  memory: the wrappers load from that copy only, never from a path the submission can write.

So an entry holds nothing but what the DSL compiled in a passing grading of the same source,
and reaches only runners of that same source (docs/grading.md, "Compile once per source").
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
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

from engine.grading.runner.compiled import COMPILE_DIR, TAG, sign

RUNNER_DIR = COMPILE_DIR  # where a runner's DSL caches write, in its workdir
ENV_ROOT = "MKB_COMPILE_CACHE"  # a folder; "off" (or "0", "none") turns the cache off
DEFAULT_ROOT = Path("~/.cache/metakernelbench/compile")  # the grader's own, never a jail's
ARCHIVE = "entry.tar"
DIGEST = "entry.sha256"
MAX_BYTES = 32 * 2**20  # one entry (a CuTe kernel's cache file is a few hundred kB)
MAX_FILES = 4096
MAX_TOTAL_BYTES = 8 * 2**30  # all entries: past it, nothing more is kept
TOOLCHAIN = ("torch", "nvidia-cutlass-dsl", "apache-tvm", "tvm", "tvm-ffi", "apache-tvm-ffi")


def cache_root() -> Path | None:
    """Where entries are kept (on by default, in the grader's home, which no jail binds), or
    None when ``$MKB_COMPILE_CACHE`` turns it off."""
    value = os.environ.get(ENV_ROOT, "").strip()
    if value.lower() in ("off", "0", "none", "false"):
        return None
    return Path(value) if value else DEFAULT_ROOT.expanduser()


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


def tagged(files: list[tuple[str, bytes]], secret: bytes) -> list[tuple[str, bytes]]:
    """The files whose tag beside them is the one the runner's wrappers made with this
    grading's ``secret`` for exactly that name and content (``runner/compiled.py``)."""
    by_name = dict(files)
    kept = []
    for name, data in files:
        tag = by_name.get(name + TAG)
        if name.endswith(TAG) or tag is None:
            continue
        if hmac.compare_digest(tag.decode(errors="replace").strip(), sign(secret, name, data)):
            kept.append((name, data))
    return kept


def harvest(root: Path, key: str, folder: Path, secret: bytes) -> bool:
    """Keep the tagged files a dead runner's DSL wrappers wrote under ``folder`` as the entry
    ``key`` (only if there is none yet); whether an entry was written."""
    if (root / key).exists() or not folder.is_dir() or folder.is_symlink():
        return False
    files = _regular_files(folder)
    files = tagged(files, secret) if files else None
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
