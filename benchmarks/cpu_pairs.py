"""Which CPUs of this host slow each other down, and what a short sleep costs the next work.

    python3 benchmarks/cpu_pairs.py OUT.json [--slice-s 0.1]

For the grader's small calls (issue 16: p36's host time varies 2x between evaluations on the
H200 while its device time does not). A virtual machine may hide which vCPUs share a physical
core; this measures it: one worker process pinned to each CPU counts loop turns for
``--slice-s`` alone, then for every pair of CPUs both count at once. A pair whose turns fall
well below their solo rates shares a core (or its cache and power budget). Then, in one
process, a fixed chunk of Python work is timed hot and right after sleeps of 0.2, 2 and 20 ms
(the cost of waking up: frequency, caches). Writes one JSON object; no GPU needed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import statistics
import time
from pathlib import Path
from typing import Any


def _worker(cpu: int, conn: Any) -> None:
    os.sched_setaffinity(0, {cpu})
    clock = time.perf_counter
    while True:
        until = conn.recv()
        if until is None:
            return
        while clock() < until[0]:  # wait for the common start (spinning, so the core is up)
            pass
        turns, end = 0, until[1]
        while clock() < end:
            turns += 1
        conn.send(turns)


def pair_matrix(cpus: list[int], slice_s: float) -> dict[str, Any]:
    ctx = mp.get_context("fork")
    links = {}
    procs = []
    for cpu in cpus:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_worker, args=(cpu, child), daemon=True)
        proc.start()
        links[cpu] = parent
        procs.append(proc)

    def run(group: tuple[int, ...]) -> dict[int, int]:
        start = time.perf_counter() + 0.02
        for cpu in group:
            links[cpu].send((start, start + slice_s))
        return {cpu: links[cpu].recv() for cpu in group}

    solo = {cpu: statistics.median(run((cpu,))[cpu] for _ in range(3)) for cpu in cpus}
    pairs = []
    for a, b in itertools.combinations(cpus, 2):
        got = run((a, b))
        pairs.append(
            {"a": a, "b": b, "ra": round(got[a] / solo[a], 3), "rb": round(got[b] / solo[b], 3)}
        )
    for link in links.values():
        link.send(None)
    for proc in procs:
        proc.join(5)
    slowest = sorted(pairs, key=lambda p: min(p["ra"], p["rb"]))[:12]
    return {"solo_turns": solo, "pairs": pairs, "slowest_pairs": slowest}


def wake_cost(repeats: int = 30) -> dict[str, Any]:
    """Median µs of a fixed chunk of work, hot and right after a sleep of each length."""

    def chunk() -> float:
        t0 = time.perf_counter()
        total = 0
        for i in range(3000):
            total += i * i
        return (time.perf_counter() - t0) * 1e6

    out: dict[str, Any] = {}
    for label, sleep_s in (("hot", 0.0), ("0.2ms", 2e-4), ("2ms", 2e-3), ("20ms", 2e-2)):
        samples = []
        for _ in range(repeats):
            if sleep_s:
                time.sleep(sleep_s)
            else:
                chunk()
            samples.append(chunk())
        out[label] = round(statistics.median(samples), 2)
    return out


def host_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"cpus": os.cpu_count()}
    try:
        info = Path("/proc/cpuinfo").read_text().split("\n\n")[0]
        for line in info.splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("model name", "cpu MHz", "siblings", "cpu cores"):
                facts[key] = value.strip()
            if key == "flags":
                facts["hypervisor"] = "hypervisor" in value.split()
    except OSError:
        pass
    siblings = {}
    for cpu in range(os.cpu_count() or 0):
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        if path.exists():
            siblings[cpu] = path.read_text().strip()
    facts["thread_siblings"] = siblings
    governor = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")
    facts["governor"] = governor.read_text().strip() if governor.exists() else None
    return facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--slice-s", type=float, default=0.1)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    record = {"host": host_facts(), "wake_us": wake_cost(), **pair_matrix(cpus, args.slice_s)}
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps({"host": record["host"], "wake_us": record["wake_us"]}))
    for pair in record["slowest_pairs"]:
        print(pair)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
