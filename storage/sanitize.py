"""Untrusted text made safe to display: terminal control sequences removed, nothing else.

Agents write skills, trajectories, feedback, outcome messages and implementation source;
annotators write labels. Shown raw, an escape sequence in any of them reaches the terminal
(or the browser's terminal under textual-serve): it can clear the screen, retitle the window
or write the clipboard (OSC 52). :func:`clean` is the one sanitizer for text that leaves the
store for display (the TUI's reads, ``mkb analyze`` and ``mkb rubric`` output). The store
itself keeps the raw text.

Kept: printable Unicode, newlines and tabs (``\\r\\n`` and a lone ``\\r`` become ``\\n``).
Removed: ESC sequences (CSI, OSC ended by BEL or ST, DCS / SOS / PM / APC strings, two-byte
escapes), their 8-bit C1 forms, every other C0 / C1 control, DEL and the bidirectional
overrides that reorder what is shown. Markup-like text such as ``[bold]`` is not touched:
widgets render it as plain text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

_STRING_END = r"(?:\x07|\x1b\\|\x9c|(?=[\n\x1b])|$)"  # BEL or ST (else: line end, ESC)
_SEQUENCES = re.compile(
    "|".join(
        (
            rf"(?:\x1b\]|\x9d)[^\x07\x1b\x9c\n]*{_STRING_END}",  # OSC (title, clipboard, links)
            rf"(?:\x1b[PX^_]|[\x90\x98\x9e\x9f])[^\x1b\x9c\n]*{_STRING_END}",  # DCS SOS PM APC
            r"(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]?",  # CSI (cursor, erase, colours, modes)
            r"\x1b[ -/]*[0-~]?",  # every other escape (reset, charsets, keypad, ...)
        )
    )
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def clean_text(text: str) -> str:
    """``text`` without control sequences or control characters (newlines and tabs kept)."""
    if not _UNSAFE.search(text):
        return text  # the common case: nothing to do
    text = _SEQUENCES.sub("", text)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    return _CONTROLS.sub("", text)


def _clean_json(text: str) -> str:
    """A JSON document with every string in it cleaned (escaped controls included)."""
    try:
        value = json.loads(text)
    except ValueError:
        return clean_text(text)
    cleaned = clean(value)
    return text if cleaned == value else json.dumps(cleaned, ensure_ascii=False)


def clean[T](value: T) -> T:
    """``value`` with every string in it cleaned: strings, and the strings inside
    dataclass rows (``*_json`` fields are parsed and cleaned too), dicts, lists and tuples.
    Other values are returned as they are; unchanged containers are not copied."""
    result: Any = value
    if isinstance(value, str):
        result = clean_text(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for field in dataclasses.fields(value):
            if not field.init:
                continue
            old = getattr(value, field.name)
            if old is None or isinstance(old, (int, float)):
                continue  # a number or nothing: no text to clean
            new = (
                _clean_json(old)
                if field.name.endswith("_json") and isinstance(old, str)
                else clean(old)
            )
            if new is not old:
                changes[field.name] = new
        if changes:
            result = dataclasses.replace(value, **changes)
    elif isinstance(value, dict):
        items = [(clean(k), clean(v)) for k, v in value.items()]
        if any(k is not k0 or v is not v0 for (k, v), (k0, v0) in zip(items, value.items())):
            result = dict(items)
    elif isinstance(value, (list, tuple)):
        cleaned = [clean(v) for v in value]
        if any(new is not old for new, old in zip(cleaned, value)):
            if isinstance(value, list):
                result = cleaned
            elif hasattr(value, "_fields"):  # a named tuple
                result = type(value)(*cleaned)
            else:
                result = tuple(cleaned)
    return result  # type: ignore[no-any-return]
