"""Agreement between annotators: Cohen's kappa per category and annotator pair, and the list
of items on which annotators disagree."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from itertools import combinations
from typing import Any

from sqlite_utils import Database

from engine.rubric.labels import LabelKey, label_rows


def cohen_kappa(a: Sequence[str], b: Sequence[str]) -> float | None:
    """Cohen's kappa of two raters over the same items (None when it is undefined)."""
    if len(a) != len(b):
        raise ValueError("both raters must rate the same items")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = sum(count_a[k] * count_b[k] for k in count_a) / (n * n)
    if expected >= 1.0:  # both raters used one and the same value throughout
        return None
    return (observed - expected) / (1.0 - expected)


def _by_item(db: Database, task: str | None, experiment_id: str | None
             ) -> dict[LabelKey, dict[str, str]]:
    items: dict[LabelKey, dict[str, str]] = defaultdict(dict)
    for row in label_rows(db, task=task, experiment_id=experiment_id):
        items[(row.task, row.subject_id, row.category)][row.annotator] = row.value
    return items


def agreement(db: Database, *, task: str | None = None, experiment_id: str | None = None
              ) -> list[dict[str, Any]]:
    """Per (task, category, annotator pair): shared items, agreements and Cohen's kappa."""
    pairs: dict[tuple[str, str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for (t, _subject, category), by_annotator in _by_item(db, task, experiment_id).items():
        for left, right in combinations(sorted(by_annotator), 2):
            pairs[(t, category, left, right)].append((by_annotator[left], by_annotator[right]))
    rows = []
    for (t, category, left, right), values in sorted(pairs.items()):
        a, b = [v[0] for v in values], [v[1] for v in values]
        rows.append({"task": t, "category": category, "annotator_a": left,
                     "annotator_b": right, "n": len(values),
                     "agree": sum(x == y for x, y in values), "kappa": cohen_kappa(a, b)})
    return rows


def disagreements(db: Database, *, task: str | None = None, category: str | None = None,
                  experiment_id: str | None = None) -> list[dict[str, Any]]:
    """Items whose annotators gave different values, with every annotator's value."""
    out = []
    for (t, subject, cat), by_annotator in sorted(_by_item(db, task, experiment_id).items()):
        if category is not None and cat != category:
            continue
        if len(set(by_annotator.values())) > 1:
            out.append({"task": t, "subject_id": subject, "category": cat,
                        "values": dict(sorted(by_annotator.items()))})
    return out
