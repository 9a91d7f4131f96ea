"""The plan: attempts as a transfer graph, and the comparisons they resolve.

Per (model, problem, replicate) the paper's four arms: ``solo_cute``, ``solo_tirx`` and the
treatments ``cute2tirx_skill`` / ``tirx2cute_skill``, each fed by the source-DSL solo skill.
Beyond the paper, config ``[[transfers]]`` add edges: cross-model transfer (a source model's
solo skill to a target model's treatment), chained rounds (round k's source is round k−1's
treatment in the other direction) and a person's edited skill (ablation).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from engine.config import ExperimentConfig, select_problems

ARM_DSL = {
    "solo_cute": "cute",
    "solo_tirx": "tirx",
    "cute2tirx_skill": "tirx",
    "tirx2cute_skill": "cute",
}
DIRECTION_ARM = {"cute->tirx": "cute2tirx_skill", "tirx->cute": "tirx2cute_skill"}
SOLO = {"cute": "solo_cute", "tirx": "solo_tirx"}


def direction_dsls(direction: str) -> tuple[str, str]:
    source, target = direction.split("->")
    return source, target


@dataclass(frozen=True)
class PlanNode:
    """One attempt to run."""

    key: str
    model: str
    problem_id: str
    family: str
    dsl: str
    arm: str
    replicate: int
    round: int = 0
    variant: str = ""
    source_key: str | None = None  # the attempt whose skill is attached
    edited_skill: str | None = None  # a person's skill text used instead of the source's

    @property
    def is_treatment(self) -> bool:
        return self.arm.endswith("_skill")


@dataclass(frozen=True)
class ComparisonSpec:
    """source → (baseline, treatment) for one model, problem, direction and replicate."""

    model: str
    problem_id: str
    family: str
    direction: str
    replicate: int
    round: int
    variant: str
    source_key: str
    baseline_key: str
    treatment_key: str


@dataclass(frozen=True)
class Plan:
    nodes: tuple[PlanNode, ...]
    comparisons: tuple[ComparisonSpec, ...]

    def node(self, key: str) -> PlanNode:
        index = self.__dict__.get("_index")
        if index is None:
            index = {n.key: n for n in self.nodes}
            object.__setattr__(self, "_index", index)
        return index[key]

    def comparisons_touching(self, key: str) -> list[ComparisonSpec]:
        """Comparisons in which the attempt ``key`` is the source, baseline or treatment."""
        index = self.__dict__.get("_by_member")
        if index is None:
            index = {}
            for c in self.comparisons:
                for member in (c.source_key, c.baseline_key, c.treatment_key):
                    index.setdefault(member, []).append(c)
            object.__setattr__(self, "_by_member", index)
        return list(index.get(key, []))

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for n in self.nodes:
            out[n.arm] = out.get(n.arm, 0) + 1
        return out


def node_key(
    model: str, problem: str, replicate: int, arm: str, round_: int = 0, variant: str = ""
) -> str:
    key = f"{model}|{problem}|r{replicate}|{arm}"
    if round_ > 1:
        key += f"|round{round_}"
    if variant:
        key += f"|{variant}"
    return key


def build_plan(config: ExperimentConfig) -> Plan:
    """Expand a config into attempts and comparisons (deterministic order)."""
    from problems.registry import catalog

    cat = catalog()
    problem_ids = select_problems(config)
    nodes: list[PlanNode] = []
    comps: list[ComparisonSpec] = []
    both = set(config.dsls) == {"cute", "tirx"}
    rounds = max((e.rounds for e in config.transfers if e.kind == "chain"), default=1)

    def add(node: PlanNode) -> None:
        nodes.append(node)

    for model in config.models:
        for pid in problem_ids:
            family = cat.get(pid).family
            for rep in range(1, config.replicates + 1):
                for dsl in config.dsls:
                    add(PlanNode(node_key(model.name, pid, rep, SOLO[dsl]), model.name, pid,
                                 family, dsl, SOLO[dsl], rep))
                if not both:
                    continue
                for round_ in range(1, rounds + 1):
                    for direction, arm in DIRECTION_ARM.items():
                        src_dsl, tgt_dsl = direction_dsls(direction)
                        if round_ == 1:
                            source = node_key(model.name, pid, rep, SOLO[src_dsl])
                        else:
                            reverse = DIRECTION_ARM[f"{tgt_dsl}->{src_dsl}"]
                            source = node_key(model.name, pid, rep, reverse, round_ - 1)
                        key = node_key(model.name, pid, rep, arm, round_)
                        add(PlanNode(key, model.name, pid, family, tgt_dsl, arm, rep, round_,
                                     source_key=source))
                        comps.append(ComparisonSpec(
                            model.name, pid, family, direction, rep, round_, "", source,
                            node_key(model.name, pid, rep, SOLO[tgt_dsl]), key))

    if both:
        for edge in config.transfers:
            if edge.kind == "cross_model":
                assert edge.source_model and edge.target_model
                _add_cross_model(edge.source_model, edge.target_model, problem_ids, config,
                                 cat, nodes, comps)
            elif edge.kind == "edited_skill":
                assert edge.problem and edge.direction and edge.skill_text and edge.target_model
                pid = cat.get(edge.problem).id
                if pid not in problem_ids:
                    continue
                digest = hashlib.sha256(edge.skill_text.encode()).hexdigest()[:8]
                variant = f"edited:{digest}"
                src_dsl, tgt_dsl = direction_dsls(edge.direction)
                arm = DIRECTION_ARM[edge.direction]
                family = cat.get(pid).family
                for rep in range(1, config.replicates + 1):
                    source = node_key(edge.target_model, pid, rep, SOLO[src_dsl])
                    key = node_key(edge.target_model, pid, rep, arm, 1, variant)
                    nodes.append(PlanNode(key, edge.target_model, pid, family, tgt_dsl, arm,
                                          rep, 1, variant, source_key=source,
                                          edited_skill=edge.skill_text))
                    comps.append(ComparisonSpec(
                        edge.target_model, pid, family, edge.direction, rep, 1, variant, source,
                        node_key(edge.target_model, pid, rep, SOLO[tgt_dsl]), key))
    return Plan(tuple(nodes), tuple(comps))


def _add_cross_model(
    source_model: str,
    target_model: str,
    problem_ids: list[str],
    config: ExperimentConfig,
    cat: object,
    nodes: list[PlanNode],
    comps: list[ComparisonSpec],
) -> None:
    variant = f"from:{source_model}"
    for pid in problem_ids:
        family = cat.get(pid).family  # type: ignore[attr-defined]
        for rep in range(1, config.replicates + 1):
            for direction, arm in DIRECTION_ARM.items():
                src_dsl, tgt_dsl = direction_dsls(direction)
                source = node_key(source_model, pid, rep, SOLO[src_dsl])
                key = node_key(target_model, pid, rep, arm, 1, variant)
                nodes.append(PlanNode(key, target_model, pid, family, tgt_dsl, arm, rep, 1,
                                      variant, source_key=source))
                comps.append(ComparisonSpec(
                    target_model, pid, family, direction, rep, 1, variant, source,
                    node_key(target_model, pid, rep, SOLO[tgt_dsl]), key))


def describe(plan: Plan) -> str:
    """A human summary of the plan (for --dry-run)."""
    lines = [f"{len(plan.nodes)} attempts, {len(plan.comparisons)} comparisons"]
    for arm, n in sorted(plan.counts().items()):
        lines.append(f"  {arm:<18} {n}")
    lines.append("attempts:")
    for node in plan.nodes:
        src = f"  ← {node.source_key}" if node.source_key else ""
        if node.edited_skill:
            src += " (edited skill)"
        lines.append(f"  {node.key}{src}")
    return "\n".join(lines)
