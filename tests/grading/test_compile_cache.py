"""Compiled DSL modules kept per source (engine/grading/judge/compile_cache.py and the runner's
wrappers, engine/grading/runner/compiled*.py): reused by a later grading of the same source,
never loaded for another, and never a file the submission wrote itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from engine.grading.api import Feedback
from engine.grading.judge import compile_cache as cc
from engine.grading.runner.compiled import TAG, keep, sign, unpack

FIXTURES = Path(__file__).parent / "fixtures"
TIRX = FIXTURES / "compiled" / "p28_tirx_llvm.py"
TVM_PROBE = FIXTURES / "compiled" / "tvm_probe.py"
CUTE_PROBE = FIXTURES / "compiled" / "cute_probe.py"
TOOLS = {"python": "3.12.0", "host": "h", "torch": "2.11"}
# what a submission can do to its own compile folder: plant a library and a tag for it
PLANTING = """
from pathlib import Path as _Path

_PLANT = _Path(".mkb-compile/tvm/planted.so")
_PLANT.parent.mkdir(parents=True, exist_ok=True)
_PLANT.write_bytes(b"foreign code")
_PLANT.with_name("planted.so.tag").write_text("0" * 64)
"""


def test_each_runner_caches_in_its_own_workdir_jailed_or_not(tmp_path: Path) -> None:
    """CuTe's file cache defaults to /tmp/<user>/cutlass_python_cache: unjailed, the host's
    /tmp, which every unjailed runner (any source) shares."""
    from engine.grading.judge.runner_proc import JAIL_WORKDIR, RunnerOptions, dsl_cache_env

    unjailed = dsl_cache_env(RunnerOptions(device="cpu", jail=False), str(tmp_path))
    assert Path(unjailed["CUTE_DSL_CACHE_DIR"]).is_relative_to(tmp_path)
    jailed = dsl_cache_env(RunnerOptions(device="cpu"), str(tmp_path))
    assert Path(jailed["CUTE_DSL_CACHE_DIR"]).is_relative_to(JAIL_WORKDIR)


def test_the_key_changes_with_the_source_dsl_device_and_toolchain() -> None:
    key = cc.entry_key("src", "cute", "NVIDIA H100", TOOLS)
    assert key == cc.entry_key("src", "cute", "NVIDIA H100", dict(TOOLS))
    others = {
        cc.entry_key("src ", "cute", "NVIDIA H100", TOOLS),
        cc.entry_key("src", "tirx", "NVIDIA H100", TOOLS),
        cc.entry_key("src", "cute", "NVIDIA H200", TOOLS),
        cc.entry_key("src", "cute", "NVIDIA H100", {**TOOLS, "torch": "2.12"}),
        cc.entry_key("src", "cute", "NVIDIA H100", {**TOOLS, "host": "other"}),
    }
    assert key not in others and len(others) == 5


SECRET = b"k" * 32


def _tag(folder: Path, name: str, data: bytes, secret: bytes = SECRET) -> None:
    """What the runner's wrappers write: the file and its tag (runner/compiled.py)."""
    keep(str(folder), secret, name, data)


def test_an_entry_round_trips_to_its_key_only_and_is_written_once(tmp_path: Path) -> None:
    runner_work = tmp_path / "work"
    _tag(runner_work, "cute/sub/kernel.bin", b"cubin")
    root = tmp_path / "cache"
    assert cc.harvest(root, "a" * 64, runner_work, SECRET)
    _tag(runner_work, "cute/sub/kernel.bin", b"other")
    assert not cc.harvest(root, "a" * 64, runner_work, SECRET)  # the first writer's entry stays
    assert cc.deliver(root, "b" * 64) is None  # another key finds nothing
    fd = cc.deliver(root, "a" * 64)
    assert fd is not None
    assert unpack(fd) == {"cute/sub/kernel.bin": b"cubin"}  # the tag is not part of the entry


def test_only_files_tagged_with_this_gradings_key_are_kept(tmp_path: Path) -> None:
    """A submission can write into .mkb-compile/ (plain files, copied tags, tags made with a
    key it guessed); only what the runner's wrappers tagged with the judge's key is kept."""
    work = tmp_path / "work"
    _tag(work, "tvm/good.so", b"library")
    (work / "tvm" / "planted.so").write_bytes(b"foreign code")  # no tag
    _tag(work, "tvm/guessed.so", b"foreign code", secret=b"g" * 32)  # another key
    _tag(work, "tvm/swapped.so", b"library")
    (work / "tvm" / "swapped.so").write_bytes(b"foreign code")  # content changed after tagging
    (work / "tvm" / "renamed.so").write_bytes(b"library")  # a valid tag, copied to a new name
    (work / "tvm" / "renamed.so.tag").write_bytes((work / "tvm" / "good.so.tag").read_bytes())
    root = tmp_path / "cache"
    assert cc.harvest(root, "t" * 64, work, SECRET)
    fd = cc.deliver(root, "t" * 64)
    assert fd is not None
    assert unpack(fd) == {"tvm/good.so": b"library"}
    # nothing tagged with this grading's key: no entry at all
    assert not cc.harvest(root, "u" * 64, work, b"x" * 32)
    assert not (root / ("u" * 64)).exists()


def test_an_entry_that_fails_its_hash_is_not_delivered(tmp_path: Path) -> None:
    work = tmp_path / "work"
    _tag(work, "kernel.bin", b"cubin")
    root = tmp_path / "cache"
    assert cc.harvest(root, "k" * 64, work, SECRET)
    archive = root / ("k" * 64) / cc.ARCHIVE
    archive.write_bytes(archive.read_bytes().replace(b"cubin", b"evil!"))
    assert cc.deliver(root, "k" * 64) is None


def test_a_harvest_takes_no_link_fifo_or_second_name(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("outside")
    work = tmp_path / "work"
    _tag(work, "kernel.bin", b"cubin")
    (work / "link").symlink_to(secret)
    (work / "dirlink").symlink_to(outside, target_is_directory=True)
    os.mkfifo(work / "fifo")  # would block a reader that opened it blindly
    os.link(secret, work / "hardlink")
    for name in ("link", "fifo", "hardlink"):  # tagged as if the wrappers wrote them
        (work / (name + TAG)).write_text(sign(SECRET, name, b"host secret"))
    root = tmp_path / "cache"
    assert cc.harvest(root, "h" * 64, work, SECRET)
    fd = cc.deliver(root, "h" * 64)
    assert fd is not None
    assert list(unpack(fd)) == ["kernel.bin"]
    # the folder itself a link (to a host folder the judge can read): nothing is kept
    (tmp_path / "linked").symlink_to(outside, target_is_directory=True)
    assert not cc.harvest(root, "l" * 64, tmp_path / "linked", SECRET)


def test_on_by_default_in_the_graders_home_off_when_asked(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(cc.ENV_ROOT, "off")
    assert cc.cache_root() is None
    monkeypatch.delenv(cc.ENV_ROOT)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cc.cache_root() == tmp_path / "home" / ".cache" / "metakernelbench" / "compile"
    monkeypatch.setenv(cc.ENV_ROOT, str(tmp_path / "cache"))
    assert cc.cache_root() == tmp_path / "cache"
    (tmp_path / "empty").mkdir()
    assert not cc.harvest(tmp_path / "cache", "e" * 64, tmp_path / "empty", SECRET)
    assert not (tmp_path / "cache" / ("e" * 64)).exists()
    # past the bound on all entries together, a new one is not kept (the disk is not filled)
    _tag(tmp_path / "work", "kernel.bin", b"x" * 1000)
    assert cc.harvest(tmp_path / "cache", "f" * 64, tmp_path / "work", SECRET)
    monkeypatch.setattr(cc, "MAX_TOTAL_BYTES", 2000)
    assert not cc.harvest(tmp_path / "cache", "g" * 64, tmp_path / "work", SECRET)


def _probe(script: Path, work: Path) -> dict[str, object]:
    """Run a DSL probe in its own interpreter (the wrappers patch the DSL process-wide)."""
    result = subprocess.run(
        [sys.executable, str(script), str(work)], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    seen: dict[str, object] = json.loads(result.stdout.strip().splitlines()[-1])
    return seen


def test_the_tvm_wrapper_loads_the_delivered_library_and_never_a_planted_one(
    tmp_path: Path,
) -> None:
    """The real TVM in its own interpreter (tests/grading/fixtures/compiled/tvm_probe.py):
    ``tvm.compile(add)`` with a delivered library for ``add`` that is really ``sub``'s
    computes a - b, so the library was loaded, not compiled; a library planted in the compile
    folder under ``mul``'s name is not loaded (a * b), and the file the wrapper writes for
    ``mul`` carries the key's tag; the delivered CUDA source's kernel names reach the hooks."""
    seen = _probe(TVM_PROBE, tmp_path)
    assert seen == {"add": 3.0, "mul": 18.0, "mul_tagged": True, "names": ["add_kernel"]}


def test_cutes_file_cache_loads_only_the_delivered_entry_and_tags_its_dumps(
    tmp_path: Path,
) -> None:
    """The real CuTe DSL in its own interpreter (fixtures/compiled/cute_probe.py): the file
    its cache dumped is tagged; a file lying in CuTe's cache folder (where a submission can
    write one) is not loaded, the same bytes delivered as the entry are."""
    seen = _probe(CUTE_PROBE, tmp_path)
    assert seen == {"tagged": True, "planted_loaded": False, "delivered_loaded": True}


def test_a_tirx_source_reuses_its_library_and_another_source_never_sees_it(
    grade: Callable[..., Feedback],
) -> None:
    """Real jailed gradings of a TIRx kernel built for the CPU: the first grading of source A
    keeps its library, the second gets it; source B (A plus a comment and a planting step)
    does not get A's entry, and its own entry holds its library only, never the files it
    planted in the compile folder (a library and a tag made with a guessed key)."""
    source_a = TIRX.read_text()
    source_b = source_a + PLANTING
    first = grade(source_a, dsl="tirx")
    assert first.verdict == "preview", first.message
    assert first.clock.get("compile_cache") == "missed"
    again = grade(source_a, dsl="tirx")
    assert again.verdict == "preview", again.message
    assert again.clock.get("compile_cache") == "loaded"
    root = cc.cache_root()
    assert root is not None
    before = set(os.listdir(root))
    other = grade(source_b, dsl="tirx")
    assert other.verdict == "preview", other.message
    assert other.clock.get("compile_cache") == "missed"
    (new,) = set(os.listdir(root)) - before
    fd = cc.deliver(root, new)
    assert fd is not None
    kept = unpack(fd)
    assert len(kept) == 1 and next(iter(kept)).startswith("tvm/") and "planted" not in str(kept)
