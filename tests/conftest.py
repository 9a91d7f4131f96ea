"""Shared fixtures: every test gets its own SQLite file and guide cache, and never touches
./mkb-data or the user's cache. Also the suite's process settings and its xdist grouping."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# One CPU thread per torch process (set before anything imports torch; children inherit it).
# torch's default, one spinning OpenMP thread per core, makes two xdist workers on two cores
# fight: the catalog's smoke checks of three problems took 17 s of CPU with 2 threads, 8 s with 1.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# compiled DSL modules kept per source (engine/grading/judge/compile_cache.py, off unless a
# folder is named): on in the suite, in a folder of this test process's own
os.environ.setdefault("MKB_COMPILE_CACHE", tempfile.mkdtemp(prefix="mkb-test-compile-"))


# The parallel run's longest chains, longest first (a module, or an xdist group's modules:
# `--durations` of a whole `make test` on the 2-core CI machine, docs/benchmarks.md "Cutting
# the CI run"): the workers start them before anything else, so no long test starts in the
# run's last minutes.
LONGEST_FIRST = (
    "tests/engine/test_demo.py",  # the demo group: one `mkb demo --headless` run,
    "tests/bundle/test_demo_roundtrip.py",  # then its export and CPU re-grade
    "tests/engine/test_crash_resume.py",  # kill -9 and rerun
    "tests/engine/test_paired_repeats_crash.py",
    "tests/engine/test_noise_simulated.py",  # a group: one simulated 360-attempt run
    "tests/scale/test_ray_cli.py",  # three `ray start` nodes
    "tests/attempts/test_compile_check_attempt.py",  # three jailed attempts, B200 compiles
    "tests/bundle/test_regrade.py",
    "tests/grading/test_grading_jail_escape.py",  # a group: 18 gradings
    "tests/solutions/test_solution_variants.py",  # DSL compiles
    "tests/engine/test_final_repeats_crash.py",
    "tests/grading/test_card_memory.py",
    "tests/scale/test_fleet.py",  # three grading services, 8 gradings
    "tests/grading/test_dsl_launch_paths.py",  # a group: DSL compiles
    "tests/tui/test_tmux_supervise.py",  # a supervised `mkb run` in tmux
    "tests/tui/test_browser_control.py",  # Chromium and two `mkb tui --serve`
    "tests/grading/test_warm_calls.py",  # a group
    "tests/grading/test_dsl_checks.py",  # a group
)


def _start_rank(item: pytest.Item) -> tuple[int, bool]:
    """Where a test starts on an xdist worker: the longest chains first, in LONGEST_FIRST's
    order, then the other slow tests, then the rest (the order otherwise kept)."""
    module = item.nodeid.split("::", 1)[0]
    rank = LONGEST_FIRST.index(module) if module in LONGEST_FIRST else len(LONGEST_FIRST)
    return rank, item.get_closest_marker("slow") is None


def pytest_configure(config: pytest.Config) -> None:
    """xdist's loadgroup hands out work in the order it was collected (below) only without its
    default reordering, which puts the groups with the most tests first whatever their cost."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """Before the other hooks (xdist's loadgroup reads the groups): tests marked serial share
    one xdist group, so with a plain ``pytest -n N`` (no separate serial run, see the Makefile)
    they at least never run beside each other. After them (every slow mark set, ``-m``
    applied), on an xdist worker: the longest chains, then the other slow tests first, so the
    long ones start early and the short ones fill the workers' last minutes."""
    for item in items:
        if item.get_closest_marker("serial") and not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group("serial"))
    result = yield
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_start_rank)
    return result


@pytest.fixture(autouse=True)
def _isolated_db_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MKB_DB", str(tmp_path / "default.sqlite"))
    monkeypatch.setenv("MKB_GUIDES_CACHE", str(tmp_path / "guides-cache"))


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "test.sqlite"


@pytest.fixture
def store(db_path: Path) -> Iterator[object]:
    from storage.store import Store

    s = Store(db_path)
    yield s
    s.close()


@pytest.fixture(scope="session")
def demo_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``mkb demo --headless`` run once per test process (about a minute of this machine's
    two cores): its store and what it printed. Tests that read it carry
    ``xdist_group("demo")`` so they share one run; a test that writes copies the store first."""
    import contextlib
    import io

    from app.cli import main

    path = tmp_path_factory.mktemp("demo") / "demo.sqlite"
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        code = main(["demo", "--headless", "--db", str(path)])
    assert code == 0, printed.getvalue()[-2000:]
    return path, printed.getvalue()
