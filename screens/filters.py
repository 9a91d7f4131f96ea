"""The Attempts screen's filter language.

``state:running model:gpt problem:28 family:"MLP & Norm" fused`` is a set of column tokens
(``key:value``, the value quoted with ``"`` or ``'`` when it has spaces; an unclosed quote
runs to the end) plus free text. Columns match as the CLI names things:

* ``problem`` / ``p``: ``p28``, ``28``, the slug, a glob or part of a slug (any of the ids);
* ``model`` / ``m``: any model whose name contains the value (a prefix counts), any case;
* ``family``: a family's name or folder in any case (``kv cache``, ``mlp_norm``), else any
  family containing the value;
* ``dsl``, ``arm``, ``state`` / ``s``, ``outcome``: the exact value.
"""

from __future__ import annotations

import re

from problems.registry import matching_ids
from problems.spec import FAMILY_DIRS
from storage.queries import Contains, FilterValue

ALIASES = {"problem": "problem_id", "p": "problem_id", "m": "model", "s": "state"}
COLUMNS = {"model", "problem_id", "dsl", "arm", "state", "outcome", "family"}
_TOKEN = re.compile(
    r"""(?:(?P<key>[A-Za-z_]+):)?(?:"(?P<double>[^"]*)"?|'(?P<single>[^']*)'?|(?P<bare>\S*))"""
)


def tokens(text: str) -> list[tuple[str | None, str, str]]:
    """(key or None, value, the token as typed) for each token of ``text``."""
    out = []
    for match in _TOKEN.finditer(text):
        raw = match.group(0)
        if not raw.strip():
            continue
        value = next(
            v for v in (match["double"], match["single"], match["bare"], "") if v is not None
        )
        out.append((match["key"], value, raw))
    return out


def family_value(value: str) -> FilterValue:
    wanted = value.strip().lower()
    for folder, name in FAMILY_DIRS.items():
        if wanted in (folder, name.lower()):
            return name
    return Contains(value)


def column_value(column: str, value: str) -> FilterValue:
    if column == "problem_id":
        return tuple(matching_ids(value)) or (value,)
    if column == "model":
        return Contains(value)
    if column == "family":
        return family_value(value)
    return value


def parse_filter(text: str) -> tuple[dict[str, FilterValue], str | None]:
    """``state:running model:gpt p28`` → ({state: running, model: ∋gpt}, "p28")."""
    filters: dict[str, FilterValue] = {}
    words: list[str] = []
    for key, value, raw in tokens(text):
        column = ALIASES.get(key or "", key or "")
        if key is not None and column in COLUMNS:
            if value.strip():
                filters[column] = column_value(column, value.strip())
            continue  # "model:" alone: still being typed
        words.append(value if key is None else raw)
    return filters, (" ".join(words) or None)
