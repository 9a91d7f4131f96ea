"""Where a GPU slot's processes run: the runner on a physical core of its own, the judge on the
slot's other cores.

A runner's timed call is host work (Python, the DSL's launch path) followed by a device-wide
synchronize, while the judge busy-polls its socket for the answer. Left to the scheduler, the
two can share one physical core (hyperthread siblings: the judge's poll then takes issue slots
from the runner's call) and migrate between cores from one call to the next. So on a GPU
host each slot gets a share of the CPUs the grader may use: the physical cores near its GPU
(the PCI device's ``local_cpulist``, else all of them), split evenly among the GPUs that share
them. In its share the runner gets the first physical core (all of its hyperthreads) and the
judge, the warm parent and the reference runner's judge side the rest. A share of fewer than
two physical cores places nothing.

The backend computes the share and hands it down in the slot's environment
(``MKB_RUNNER_CPUS``, ``MKB_JUDGE_CPUS``); the warm parent pins itself to the judge CPUs (the
judges it forks inherit them) and every runner is spawned from a thread pinned, for the
moment of the fork, to the runner CPUs. ``[grading] cpu_placement = "off"`` (or
``MKB_CPU_PLACEMENT=off``) turns it off; CPU preview never places.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

SYS_CPU = Path("/sys/devices/system/cpu")
SYS_PCI = Path("/sys/bus/pci/devices")
NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")
RUNNER_ENV, JUDGE_ENV = "MKB_RUNNER_CPUS", "MKB_JUDGE_CPUS"
MODES = ("auto", "off")
NO_PLACEMENT = {RUNNER_ENV: "", JUDGE_ENV: ""}


@dataclass(frozen=True)
class Share:
    """One slot's CPUs: the runner's physical core and the judge's other cores."""

    runner: frozenset[int]
    judge: frozenset[int]

    def env(self) -> dict[str, str]:
        return {RUNNER_ENV: format_cpus(self.runner), JUDGE_ENV: format_cpus(self.judge)}


def parse_cpus(text: str) -> frozenset[int]:
    """A kernel CPU list (``0-3,8,10-11``) as a set; ValueError on anything else."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        first, last = int(low), int(high) if high else int(low)
        if first < 0 or last < first:
            raise ValueError(f"bad CPU range {part!r}")
        cpus.update(range(first, last + 1))
    return frozenset(cpus)


def format_cpus(cpus: frozenset[int] | set[int]) -> str:
    """The kernel's CPU list form of ``cpus`` (ranges joined by commas)."""
    out: list[str] = []
    for cpu in sorted(cpus):
        if out and out[-1].split("-")[-1] == str(cpu - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{cpu}"
        else:
            out.append(str(cpu))
    return ",".join(out)


def physical_cores(cpus: frozenset[int], sys_cpu: Path = SYS_CPU) -> list[frozenset[int]]:
    """``cpus`` grouped by physical core (package and core id), in order of their first CPU.
    A CPU whose topology cannot be read is a core of its own."""
    cores: dict[tuple[str, str], set[int]] = {}
    for cpu in sorted(cpus):
        topology = sys_cpu / f"cpu{cpu}" / "topology"
        try:
            key = (
                (topology / "physical_package_id").read_text().strip(),
                (topology / "core_id").read_text().strip(),
            )
        except OSError:
            key = ("?", f"cpu{cpu}")
        cores.setdefault(key, set()).add(cpu)
    return sorted((frozenset(c) for c in cores.values()), key=min)


def gpu_local_cpus(
    index: int, nvidia_gpus: Path = NVIDIA_GPUS, sys_pci: Path = SYS_PCI
) -> frozenset[int] | None:
    """The CPUs near GPU ``index`` (its PCI device's ``local_cpulist``), GPUs in PCI order;
    None when the driver's or the PCI tree's files cannot be read."""
    try:
        buses = sorted(p.name.lower() for p in nvidia_gpus.iterdir())
        return parse_cpus((sys_pci / buses[index] / "local_cpulist").read_text())
    except (OSError, IndexError, ValueError):
        return None


def share_for(
    index: int,
    gpus: int,
    allowed: frozenset[int],
    sys_cpu: Path = SYS_CPU,
    nvidia_gpus: Path = NVIDIA_GPUS,
    sys_pci: Path = SYS_PCI,
) -> Share | None:
    """GPU ``index``'s share of ``allowed`` among ``gpus`` GPUs; None when it would hold
    fewer than two physical cores."""
    if not 0 <= index < gpus:
        raise ValueError(f"GPU {index} is not one of {gpus}")

    def near(i: int) -> frozenset[int]:
        local = gpu_local_cpus(i, nvidia_gpus, sys_pci)
        mine = local & allowed if local is not None else frozenset()
        return mine or allowed

    pool = near(index)
    peers = [i for i in range(gpus) if near(i) == pool]
    cores = physical_cores(pool, sys_cpu)
    per = len(cores) // len(peers)
    if per < 2:
        return None
    position = peers.index(index)
    mine = cores[position * per : (position + 1) * per]
    return Share(runner=mine[0], judge=frozenset().union(*mine[1:]))


def from_env(env: Mapping[str, str] | None = None) -> Share | None:
    """The share handed down in ``env`` (this process's by default); None when absent."""
    env = os.environ if env is None else env
    runner, judge = env.get(RUNNER_ENV, ""), env.get(JUDGE_ENV, "")
    if not runner or not judge:
        return None
    return Share(parse_cpus(runner), parse_cpus(judge))


def pin_self(cpus: frozenset[int]) -> bool:
    """Pin the calling thread (and the processes and threads it starts later) to ``cpus``."""
    try:
        os.sched_setaffinity(0, cpus)
    except (OSError, ValueError):
        return False
    return True


@contextlib.contextmanager
def spawning_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Within: the calling thread is pinned to ``cpus``, so a child forked here starts (and
    every thread it makes stays) on them; the thread's own CPUs come back after."""
    if not cpus:
        yield
        return
    before = os.sched_getaffinity(0)
    pinned = pin_self(cpus)
    try:
        yield
    finally:
        if pinned:
            os.sched_setaffinity(0, before)


def host_gpus(nvidia_gpus: Path = NVIDIA_GPUS) -> int | None:
    """The GPUs the driver lists on this host (all of them, whatever is visible); None when
    it lists none."""
    try:
        return len(list(nvidia_gpus.iterdir())) or None
    except OSError:
        return None


def slot_env(gpu: int, gpus: int, mode: str = "auto") -> dict[str, str]:
    """The environment that hands GPU ``gpu``'s share down to its slot (both variables empty:
    no placement, whatever this process's own environment holds).

    ``gpus``: how many GPUs the shares are cut for (the host's, so that two backends on one
    host, such as two Ray actors, never pick the same cores). ``MKB_CPU_PLACEMENT=off`` in
    this process's environment turns placement off whatever ``mode`` says (A/B runs)."""
    if mode not in MODES:
        raise ValueError(f"cpu_placement must be one of {', '.join(MODES)} (got {mode!r})")
    if mode == "off" or os.environ.get("MKB_CPU_PLACEMENT", "auto") == "off":
        return dict(NO_PLACEMENT)
    share = share_for(gpu, max(gpus, gpu + 1), frozenset(os.sched_getaffinity(0)))
    return share.env() if share is not None else dict(NO_PLACEMENT)


def describe(env: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """The placement this process was handed, for the result (None: none)."""
    share = from_env(env)
    if share is None:
        return None
    return {"runner": format_cpus(share.runner), "judge": format_cpus(share.judge)}
