"""CPU inputs travel in one shared memory the runner maps once (as the device buffers on a
GPU): the judge writes each call's inputs into it, and no input page faults in the timed call."""

from __future__ import annotations

import mmap
import resource
from typing import Any

import torch

from engine.grading.judge.wire import Transport
from engine.grading.runner.loop import Runner


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def test_the_judge_keeps_one_input_memory_while_the_size_holds() -> None:
    transport = Transport(False, None)
    first = transport.ship([torch.zeros(1024)])
    assert len(first.fds) == 1  # a new memory: its memfd goes to the runner
    first.close()
    second = transport.ship([torch.ones(1024)])
    assert second.fds == [] and second.region is first.region  # written in place
    assert torch.equal(first.views[0][0], second.views[0][0])  # the old view reads the new
    third = transport.ship([torch.ones(2048)])
    assert len(third.fds) == 1 and third.region is not first.region  # another size
    third.close()
    transport.close()
    assert transport.cpu_region is None


def test_the_runner_maps_it_once_and_reads_each_calls_inputs_from_it() -> None:
    transport = Transport(False, None)
    runner = Runner(None, "cpu", None)  # type: ignore[arg-type]
    float(torch.ones(256 * 1024).sum())  # torch's own first-use faults, not the inputs'
    for value in (1.0, 2.0, 3.0):
        shipment = transport.ship([torch.full((256 * 1024,), value)])  # 1 MiB
        inputs = runner.build_inputs(shipment.layout, shipment.fds)
        shipment.fds = []  # the runner took (and closed) the memfd, as over the socket
        mapped = runner.region
        before = _faults()
        total = float(inputs[0].sum())  # what a timed call does with its inputs
        faulted = _faults() - before
        assert total == value * 256 * 1024
        assert faulted <= 4, faulted  # 256 pages: faulted in while staging, not here
    assert runner.region is mapped  # the second and third stages sent no memfd
    transport.close()


def fresh_pages(_: Any) -> int:
    """Touch 8 MiB of fresh anonymous memory: a fault per page whatever the heap's settings
    (a runner's steady heap, set by an earlier test in this process, reuses freed memory)."""
    region = mmap.mmap(-1, 8 << 20)
    for offset in range(0, 8 << 20, mmap.PAGESIZE):
        region[offset] = 1
    region.close()
    return 0


def test_the_runner_reports_the_page_faults_inside_a_call() -> None:
    """The ``faults`` of a call's answer (for the call trace): none for a call that reads its
    staged inputs, thousands for one that touches 8 MiB of fresh memory."""
    transport = Transport(False, None)
    runner = Runner(None, "cpu", None)  # type: ignore[arg-type]
    shipment = transport.ship([torch.ones(256 * 1024)])
    runner.pending = runner.build_inputs(shipment.layout, shipment.fds)
    runner.solve = lambda x: x.sum()
    runner.call({"id": 0})  # torch's first use
    for fresh, low, high in ((False, 0, 4), (True, 1500, 10**6)):
        runner.pending = runner.last_inputs
        runner.solve = fresh_pages if fresh else (lambda x: x.sum())
        reply = runner.call({"id": 1})
        assert low <= reply["faults"] <= high, reply
    transport.close()
