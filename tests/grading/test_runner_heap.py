"""The runner keeps its C heap's freed memory (``process.steady_heap``), so a call that
allocates and frees scratch memory does not fault it in again on every call."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# three 1 MiB blocks allocated, touched and freed, twenty times: glibc's default thresholds
# map the first blocks, then trim the freed top of the heap on every round (each round faults
# its pages in again); the runner's thresholds keep them
PROBE = """
import ctypes, json, resource, sys
sys.path.insert(0, {root!r})
from engine.grading.runner.process import steady_heap
kept = steady_heap() if {steady} else None
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(1 << 20) for _ in range(3)]
    for block in blocks:
        ctypes.memset(block, 1, 1 << 20)
    for block in reversed(blocks):
        libc.free(block)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({{"kept": kept, "faults": faults}}))
"""


def _faults(steady: bool) -> tuple[object, list[int]]:
    code = PROBE.format(root=str(ROOT), steady=steady)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    found = json.loads(out.stdout)
    return found["kept"], found["faults"]


def test_a_steady_heap_faults_nothing_in_again_after_the_first_rounds() -> None:
    kept, faults = _faults(steady=True)
    assert kept is True
    assert sum(faults[3:]) <= 4, faults  # 3 MiB would be 768 faults a round


def test_the_default_heap_faults_its_scratch_in_again() -> None:
    """The control: the probe does show the cost the runner avoids."""
    kept, faults = _faults(steady=False)
    assert kept is None
    assert sum(faults[3:]) > 17 * 200, faults


def test_every_runner_sets_it() -> None:
    from engine.grading.runner.loop import Runner

    assert Runner(None, "cpu", None).steady_heap is True  # type: ignore[arg-type]
