"""Plain-text table primitives of the analysis reports (percent, ratio and signed cells; a
titled table; the PREVIEW tag), shared by ``text``, ``noise_text`` and the other renderers."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PREVIEW_TAG = "[PREVIEW: CPU-graded, not comparable]"


def share(value: float | None) -> str:
    """A share in percent, ``-`` when undefined."""
    return "-" if value is None else f"{value * 100:.1f}%"


def signed(value: float | None) -> str:
    """A relative change in signed percent, ``-`` when undefined."""
    return "-" if value is None else f"{value * 100:+.1f}%"


def speed(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def fixed(value: float | None, fmt: str = "+.3f") -> str:
    return "-" if value is None else format(value, fmt)


def title(text: str, preview: bool) -> str:
    """A section title, tagged PREVIEW when computed from CPU preview verdicts."""
    return f"{text}  {PREVIEW_TAG}" if preview else text


def text_table(
    heading: str, header: Sequence[str], rows: Sequence[Sequence[Any]], left: int = 1
) -> list[str]:
    """A titled table; the first ``left`` columns are left-aligned, the rest right-aligned."""
    if not rows:
        return ["", heading, "  (none)"]
    cells = [[str(c) for c in r] for r in (header, *rows)]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return (
            "  "
            + "  ".join(
                c.ljust(w) if i < left else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )

    return ["", heading, *(line(r) for r in cells)]
