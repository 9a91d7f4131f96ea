"""Call overhead against kernel time, per attempt: what a submission's host spends launching
(``host_ms``: from the call until ``solve`` returns) and what its kernels take on the GPU
(``device_ms``), beside the end-to-end time and the same split for the eager reference.

The figures are the grader's informational ones (``clock.breakdown`` in the feedback, from
the runners, never scored): they separate a DSL's call path from kernel quality, e.g. when a
cross-DSL gap comes from launch overhead rather than from the kernels.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from storage.call_breakdown import CallSplitRow, call_splits


@dataclass(frozen=True)
class CallOverhead:
    """One attempt's split: its final evaluation, else its latest graded submission."""

    attempt_id: int
    model: str
    problem: str
    dsl: str
    arm: str
    purpose: str
    host_ms: float | None
    device_ms: float | None
    e2e_ms: float | None
    eager_host_ms: float | None
    eager_device_ms: float | None
    eager_e2e_ms: float | None

    @property
    def off_gpu_ms(self) -> float | None:
        """End to end less device time: launch, sync and gaps between the kernels."""
        if self.e2e_ms is None or self.device_ms is None:
            return None
        return max(self.e2e_ms - self.device_ms, 0.0)

    @property
    def host_share(self) -> float | None:
        """Host time as a share of end to end (0-1; above 1 is clipped)."""
        if self.host_ms is None or not self.e2e_ms:
            return None
        return min(self.host_ms / self.e2e_ms, 1.0)


def _pick(rows: list[CallSplitRow]) -> CallSplitRow | None:
    """The final evaluation with a split if any, else the latest submission with one."""
    with_split = [r for r in rows if r.e2e_ms is not None or r.host_ms is not None]
    finals = [r for r in with_split if r.purpose == "final"]
    picked = finals or with_split
    return picked[-1] if picked else None


def call_overhead(db: Any, experiment_id: str | None = None) -> list[CallOverhead]:
    """Per attempt (ordered by id): its call overhead against its kernel time."""
    by_attempt: dict[int, list[CallSplitRow]] = {}
    for split in call_splits(db, experiment_id):
        by_attempt.setdefault(split.attempt_id, []).append(split)
    out = []
    for attempt_id in sorted(by_attempt):
        row = _pick(by_attempt[attempt_id])
        if row is None:
            continue
        out.append(
            CallOverhead(
                attempt_id=attempt_id,
                model=row.model,
                problem=row.problem_id,
                dsl=row.dsl,
                arm=row.arm,
                purpose=row.purpose,
                host_ms=row.host_ms,
                device_ms=row.device_ms,
                e2e_ms=row.e2e_ms,
                eager_host_ms=row.eager_host_ms,
                eager_device_ms=row.eager_device_ms,
                eager_e2e_ms=row.eager_e2e_ms,
            )
        )
    return out


def medians_by_dsl(rows: Iterable[CallOverhead]) -> dict[str, dict[str, float | None]]:
    """Median host, device, end-to-end and off-GPU time per DSL (None where none reported)."""
    grouped: dict[str, list[CallOverhead]] = {}
    for row in rows:
        grouped.setdefault(row.dsl, []).append(row)
    out: dict[str, dict[str, float | None]] = {}
    for dsl, group in sorted(grouped.items()):
        out[dsl] = {}
        for key in ("host_ms", "device_ms", "e2e_ms", "off_gpu_ms"):
            values = [v for v in (getattr(r, key) for r in group) if v is not None]
            out[dsl][key] = statistics.median(values) if values else None
    return out
