"""Fixtures for attempt tests: a CPU grading backend, the p28 fixture solution, a test key."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from attempts_support import FIXTURES  # noqa: E402
from cpu_backend import CpuPreviewBackend  # noqa: E402


@pytest.fixture
def backend() -> CpuPreviewBackend:
    return CpuPreviewBackend()


@pytest.fixture
def p28_solution() -> str:
    return (FIXTURES / "p28_solution.py").read_text()


@pytest.fixture(autouse=True)
def _dummy_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MKB_TEST_API_KEY", "sk-test-123")
