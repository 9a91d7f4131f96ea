"""The display sanitizer: control sequences out, printable text (and markup-like text) kept."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from storage.queries import SubmissionRow
from storage.sanitize import clean, clean_text

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")

HOSTILE = {
    "clear screen": ("a\x1b[2J\x1b[Hb", "ab"),
    "colour": ("\x1b[1;31mred\x1b[0m", "red"),
    "title (OSC, BEL)": ("x\x1b]0;pwned\x07y", "xy"),
    "clipboard (OSC 52, ST)": ("x\x1b]52;c;aGVsbG8=\x1b\\y", "xy"),
    "hyperlink (OSC 8)": ("\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\", "link"),
    "unterminated OSC ends at the line": ("\x1b]0;title\nnext", "\nnext"),
    "DCS": ("a\x1bP1$qm\x1b\\b", "ab"),
    "APC": ("a\x1b_payload\x1b\\b", "ab"),
    "8-bit CSI": ("a\x9b2Jb", "ab"),
    "8-bit OSC": ("a\x9d0;t\x9cb", "ab"),
    "reset (RIS)": ("a\x1bcb", "ab"),
    "charset": ("a\x1b(0b", "ab"),
    "lone ESC": ("ab\x1b", "ab"),
    "C0 and DEL": ("a\x00\x07\x08\x7fb", "ab"),
    "carriage returns": ("one\r\ntwo\rthree", "one\ntwo\nthree"),
    "bidi override": ("abc\u202edef\u2066", "abcdef"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_control_sequences_are_removed(name: str) -> None:
    raw, expected = HOSTILE[name]
    assert clean_text(raw) == expected
    assert not CONTROL.search(clean_text(raw))


def test_printable_text_newlines_tabs_and_markup_are_kept() -> None:
    text = "naïve 日本語 ρ = 1.2 → ok\n\tindented [bold red]x[/] [link=http://a]y[/link] 🙂"
    assert clean_text(text) is text


def test_rows_dicts_and_json_fields_are_cleaned() -> None:
    feedback = {"message": "bad\x1b]0;t\x07", "draws": [{"detail": "\x1b[2Jd"}]}
    row = SubmissionRow(
        id=1,
        attempt_id=1,
        try_number=1,
        purpose="submission",
        n=1,
        source="import os\x1b[2J\n",
        source_hash="",
        state="done",
        verdict="fail",
        reason=None,
        speedup=None,
        impl_median_ms=None,
        eager_median_ms=None,
        feedback_json=json.dumps(feedback),
        submitted_at="",
        graded_at=None,
    )
    cleaned = clean({"rows": [row], "key\x1b[1m": ("a\x07", 3)})
    (out,) = cleaned["rows"]
    assert out.source == "import os\n"
    assert out.feedback == {"message": "bad", "draws": [{"detail": "d"}]}
    assert cleaned["key"] == ("a", 3)
    assert dataclasses.replace(row) == row  # the input is not modified
    safe = {"rows": [dataclasses.replace(row, source="ok", feedback_json="{}")]}
    assert clean(safe) is safe  # nothing to clean: no copy
