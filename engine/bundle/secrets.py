"""Keeping secrets out of a bundle.

Two layers: the experiment config is rewritten without any setting named like a secret or a
model API setting (``api_base``, ``api_key_env``, tokens, passwords, ...), and before the
archive is written every member is searched for the value of every secret the exporting
process can see (environment variables named like keys, the values of ``.env``): a member
that holds one gets ``[REDACTED]`` in its place and is listed in the manifest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

REDACTED = "[REDACTED]"
MIN_SECRET_LEN = 8  # shorter values match too much ordinary text to be told apart
SECRET_WORDS = frozenset(
    {
        "key",
        "keys",
        "apikey",
        "token",
        "secret",
        "secrets",
        "password",
        "passwd",
        "credential",
        "credentials",
        "auth",
        "authorization",
        "cookie",
        "bearer",
    }
)
API_SETTINGS = frozenset(
    {
        "api_base",
        "base_url",
        "api_key_env",
        "api_version",
        "organization",
        "headers",
        "endpoint",
        "url",
        "model_api_key_name",
    }
)
COUNTING = frozenset({"per", "cost", "max", "min", "count", "limit", "n", "num"})
_SPLIT = re.compile(r"[^a-z0-9]+")


def secret_name(name: str) -> bool:
    """Whether a setting or variable name says it holds a secret or a model API setting
    (``OPENAI_API_KEY``, ``api_base``, ``token``; not ``max_input_tokens`` or
    ``input_cost_per_token``, which count tokens)."""
    lowered = name.lower()
    words = [w for w in _SPLIT.split(lowered) if w]
    if lowered in API_SETTINGS:
        return True
    return bool(words) and words[-1] in SECRET_WORDS and not COUNTING & set(words)


def scrub(value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` without settings named like secrets (recursively), and the dotted paths
    of what was dropped."""
    dropped: list[str] = []
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            where = f"{path}.{key}" if path else str(key)
            if secret_name(str(key)):
                dropped.append(where)
                continue
            out[key], inner = scrub(item, where)
            dropped += inner
        return out, dropped
    if isinstance(value, list):
        items = []
        for i, item in enumerate(value):
            clean, inner = scrub(item, f"{path}[{i}]")
            items.append(clean)
            dropped += inner
        return items, dropped
    return value, dropped


def secret_values(environ: Mapping[str, str], extra: Iterable[str] = ()) -> list[str]:
    """The values to keep out: environment variables named like secrets, plus ``extra``
    (e.g. every value in ``.env``); longest first, so a longer secret is replaced whole."""
    found = {v for k, v in environ.items() if secret_name(k)} | set(extra)
    return sorted((v for v in found if len(v) >= MIN_SECRET_LEN), key=len, reverse=True)


def redact(members: dict[str, bytes], secrets: Iterable[str]) -> tuple[dict[str, bytes], list[str]]:
    """Members with every secret value replaced by :data:`REDACTED`, and the names of
    the members that held one."""
    needles: list[bytes] = []
    for secret in secrets:  # as written, and as it appears inside a JSON member
        for form in (
            secret,
            json.dumps(secret)[1:-1],
            json.dumps(secret, ensure_ascii=False)[1:-1],
        ):
            if form and form.encode() not in needles:
                needles.append(form.encode())
    out: dict[str, bytes] = {}
    touched: list[str] = []
    for name, data in members.items():
        new = data
        for needle in needles:
            if needle in new:
                new = new.replace(needle, REDACTED.encode())
        if new is not data:
            touched.append(name)
        out[name] = new
    return out, touched


def redact_value(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` (a JSON-like structure) with every secret in its strings replaced."""
    found = [s for s in secrets if s]
    if isinstance(value, str):
        for secret in found:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {redact_value(k, found): redact_value(v, found) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(v, found) for v in value]
    return value
