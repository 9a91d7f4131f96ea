"""Compiled DSL modules kept per source (engine/grading/judge/compile_cache.py): reused by a
later grading of the same source, never loaded for another, never writable by a submission."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from engine.grading.api import Feedback
from engine.grading.judge import compile_cache as cc
from engine.grading.runner.compiled import unpack

HONEST = Path(__file__).parent / "fixtures" / "honest" / "p28_plain.py"
TOOLS = {"python": "3.12.0", "host": "h", "torch": "2.11"}
# a p28 submission that leaves a file where the DSL caches write, and fails if it finds one
# there at import: it fails exactly when an earlier grading's folder reached its runner
MARKING = """
from pathlib import Path

_MARK = Path(".mkb-compile/marker")
if _MARK.exists():
    raise RuntimeError("compiled by an earlier grading: " + _MARK.read_text())
_MARK.parent.mkdir(parents=True, exist_ok=True)
_MARK.write_text("{tag}")
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


def test_an_entry_round_trips_to_its_key_only_and_is_written_once(tmp_path: Path) -> None:
    runner_work = tmp_path / "work"
    (runner_work / "cute" / "sub").mkdir(parents=True)
    (runner_work / "cute" / "sub" / "kernel.bin").write_bytes(b"cubin")
    root = tmp_path / "cache"
    assert cc.harvest(root, "a" * 64, runner_work)
    (runner_work / "cute" / "sub" / "kernel.bin").write_bytes(b"other")
    assert not cc.harvest(root, "a" * 64, runner_work)  # the first writer's entry stays
    assert cc.deliver(root, "b" * 64) is None  # another key finds nothing
    fd = cc.deliver(root, "a" * 64)
    assert fd is not None
    target = tmp_path / "runner2"
    unpack(fd, str(target))
    assert (target / "cute" / "sub" / "kernel.bin").read_bytes() == b"cubin"


def test_an_entry_that_fails_its_hash_is_not_delivered(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "kernel.bin").write_bytes(b"cubin")
    root = tmp_path / "cache"
    assert cc.harvest(root, "k" * 64, work)
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
    work.mkdir()
    (work / "kernel.bin").write_bytes(b"cubin")
    (work / "link").symlink_to(secret)
    (work / "dirlink").symlink_to(outside, target_is_directory=True)
    os.mkfifo(work / "fifo")  # would block a reader that opened it blindly
    os.link(secret, work / "hardlink")
    root = tmp_path / "cache"
    assert cc.harvest(root, "h" * 64, work)
    fd = cc.deliver(root, "h" * 64)
    assert fd is not None
    unpacked = tmp_path / "unpacked"
    unpack(fd, str(unpacked))
    assert sorted(p.name for p in unpacked.rglob("*")) == ["kernel.bin"]
    # the folder itself a link (to a host folder the judge can read): nothing is kept
    (tmp_path / "linked").symlink_to(outside, target_is_directory=True)
    assert not cc.harvest(root, "l" * 64, tmp_path / "linked")


def test_nothing_is_kept_when_off_or_empty(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv(cc.ENV_ROOT, "off")
    assert cc.cache_root() is None
    monkeypatch.delenv(cc.ENV_ROOT)
    assert cc.cache_root() is None  # off unless a folder is named
    monkeypatch.setenv(cc.ENV_ROOT, str(tmp_path / "cache"))
    assert cc.cache_root() == tmp_path / "cache"
    (tmp_path / "empty").mkdir()
    assert not cc.harvest(tmp_path / "cache", "e" * 64, tmp_path / "empty")
    assert not (tmp_path / "cache" / ("e" * 64)).exists()
    # past the bound on all entries together, a new one is not kept (the disk is not filled)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "kernel.bin").write_bytes(b"x" * 1000)
    assert cc.harvest(tmp_path / "cache", "f" * 64, tmp_path / "work")
    monkeypatch.setattr(cc, "MAX_TOTAL_BYTES", 2000)
    assert not cc.harvest(tmp_path / "cache", "g" * 64, tmp_path / "work")


def test_a_source_reuses_its_own_folder_and_another_source_never_sees_it(
    grade: Callable[..., Feedback],
) -> None:
    """Real jailed gradings: the first grading of source A leaves a file where DSL caches
    write; the second grading of A finds it (and, by construction, fails); a source that
    differs by one comment does not."""
    source_a = HONEST.read_text() + MARKING.format(tag="A")
    source_b = source_a + "# another source, the same code\n"
    first = grade(source_a)
    assert first.verdict == "preview", first.message
    assert first.clock.get("compile_cache") == "missed"
    again = grade(source_a)
    assert again.clock.get("compile_cache") == "loaded"
    assert again.verdict == "fail" and "compiled by an earlier grading: A" in (
        again.import_error or ""
    )
    other = grade(source_b)
    assert other.verdict == "preview", other.message
    assert other.clock.get("compile_cache") == "missed"
