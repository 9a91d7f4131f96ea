"""Shared fixtures for the grading tests: a warm local backend in CPU preview."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.grading.api import Feedback, GradeRequest
from engine.grading.backends.local import LocalBackend
from engine.grading.options import EvalConfig

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_PROBLEMS = {
    "p73": str(FIXTURES / "problems" / "kv_cache" / "p73_inplace_scatter_fixture.py")
}
# Short limits keep the suite fast: a 4 s time limit, 3 GiB of memory above the warm parent.
SUITE_CONFIG = dict(
    timeout_s=8.0, eager_timeout_s=60.0, memory_limit_mb=3072, problem_paths=FIXTURE_PROBLEMS
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test here that grades through ``grade`` (a real judge and jailed runner per call) is
    slow: `make test-fast` leaves it out, and no worker starts the warm backend for it."""
    here = Path(__file__).parent
    for item in items:
        if "grade" in getattr(item, "fixturenames", ()) and item.path.is_relative_to(here):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def grade() -> Iterator[Callable[..., Feedback]]:
    """Grade a source with a warm local CPU-preview backend (one slot, forked children)."""
    runner = asyncio.Runner()
    backend = LocalBackend(
        gpus=None, preview_slots=1, config=EvalConfig(**SUITE_CONFIG), preload_dsls=False
    )
    runner.run(backend.start())

    def run(source: str, problem: str = "p28", dsl: str = "cute") -> Feedback:
        return runner.run(backend.grade(GradeRequest(problem, dsl, source, device="cpu")))

    yield run
    runner.run(backend.close())
    runner.close()
