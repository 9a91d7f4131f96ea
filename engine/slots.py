"""The scheduling loop's bookkeeping: what runs, how many per model, who waited longest."""

from __future__ import annotations

import asyncio
import time

from engine.config import ExperimentConfig
from engine.plan import PlanNode


class Slots:
    """The scheduling loop's bookkeeping: what runs, per model, and who waited longest."""

    def __init__(self, config: ExperimentConfig) -> None:
        self.sandboxes = config.concurrency.sandboxes
        self.per_model_limit = config.concurrency.attempts_per_model
        self.running: dict[asyncio.Task[str], PlanNode] = {}
        self.running_keys: set[str] = set()
        self.per_model: dict[str, int] = {}
        self.started_order: dict[str, float] = {}

    def busy(self) -> bool:
        """Whether any attempt runs."""
        return bool(self.running)

    def model_free(self, node: PlanNode) -> bool:
        return self.per_model.get(node.model, 0) < self.per_model_limit

    def ready(self, node: PlanNode, todo: set[str]) -> bool:
        src = node.source_key
        return src is None or (src not in todo and src not in self.running_keys)

    def start(self, node: PlanNode, task: asyncio.Task[str]) -> None:
        self.per_model[node.model] = self.per_model.get(node.model, 0) + 1
        self.started_order[node.model] = time.monotonic()
        self.running[task] = node
        self.running_keys.add(node.key)

    def fairness(self, node: PlanNode) -> tuple[int, float]:
        """The model with the fewest running attempts, longest waiting first."""
        return self.per_model.get(node.model, 0), self.started_order.get(node.model, 0.0)

    def done(self, task: asyncio.Task[str]) -> None:
        node = self.running.pop(task)
        self.running_keys.discard(node.key)
        self.per_model[node.model] -= 1
