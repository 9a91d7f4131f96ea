"""The parallel run's start order (tests/conftest.py): the longest chains first, then the other
slow tests, then the rest, and xdist hands the work out in that order."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _suite_conftest(config: pytest.Config) -> ModuleType:
    path = str(ROOT / "tests" / "conftest.py")
    return next(p for p in config.pluginmanager.get_plugins() if getattr(p, "__file__", "") == path)


class _Item:
    """What the start order reads of a collected test: its node id and its slow mark."""

    def __init__(self, nodeid: str, slow: bool) -> None:
        self.nodeid, self.slow = nodeid, slow

    def get_closest_marker(self, name: str) -> object | None:
        return object() if name == "slow" and self.slow else None


def test_every_longest_chain_names_a_test_module(pytestconfig: pytest.Config) -> None:
    chains = _suite_conftest(pytestconfig).LONGEST_FIRST
    assert chains and len(set(chains)) == len(chains)
    assert [m for m in chains if not (ROOT / m).is_file()] == []  # none renamed away


def test_workers_start_the_longest_chains_then_the_slow_tests(
    pytestconfig: pytest.Config,
) -> None:
    conftest = _suite_conftest(pytestconfig)
    first, second = conftest.LONGEST_FIRST[0], conftest.LONGEST_FIRST[1]
    items = [
        _Item("tests/a/test_quick.py::test_one", slow=False),
        _Item(f"{second}::test_two", slow=True),
        _Item("tests/a/test_slow.py::test_three[x]", slow=True),
        _Item(f"{first}::test_four", slow=True),
        _Item("tests/a/test_quick.py::test_five", slow=False),
    ]
    ordered = sorted(items, key=conftest._start_rank)
    assert [i.nodeid.rsplit("::", 1)[1] for i in ordered] == [
        "test_four", "test_two", "test_three[x]", "test_one", "test_five"]


def test_xdist_hands_out_work_in_the_collected_order(pytestconfig: pytest.Config) -> None:
    if not pytestconfig.pluginmanager.hasplugin("xdist"):
        pytest.skip("pytest-xdist is not installed")
    assert pytestconfig.option.loadscopereorder is False  # its default, True, sorts by size
