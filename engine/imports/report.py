"""What an import read, wrote, set aside and did not understand (stored as the experiment's
``import`` report, printed by ``mkb import``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

SAMPLES = 5  # paths kept per kind of set-aside record


@dataclass
class ImportReport:
    kind: str  # "mkb-run" | "harbor-job"
    source: str
    experiment_id: str = ""
    model: str = ""
    imported: Counter[str] = field(default_factory=Counter)
    unknown: list[dict[str, str]] = field(default_factory=list)  # never dropped silently
    set_aside: dict[str, dict[str, Any]] = field(default_factory=dict)  # understood, not kept
    notes: list[str] = field(default_factory=list)
    reproduction: dict[str, Any] | None = None

    def count(self, what: str, n: int = 1) -> None:
        self.imported[what] += n

    def not_understood(self, path: str, why: str) -> None:
        self.unknown.append({"path": path, "why": why})

    def aside(self, kind: str, path: str) -> None:
        """A record understood and deliberately not imported (counted, a few paths kept)."""
        entry = self.set_aside.setdefault(kind, {"count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < SAMPLES:
            entry["examples"].append(path)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["imported"] = dict(self.imported)
        return data


def render(report: dict[str, Any]) -> str:
    """The report as plain text."""
    lines = [
        f"imported {report['kind']} {report['source']} as experiment "
        f"{report['experiment_id']} (model {report['model'] or '-'})"
    ]
    lines.append("  " + ", ".join(f"{k} {v}" for k, v in sorted(report["imported"].items())))
    for note in report["notes"]:
        lines.append(f"  note: {note}")
    for kind, entry in sorted(report["set_aside"].items()):
        lines.append(
            f"  not imported ({kind}): {entry['count']}, e.g. " + ", ".join(entry["examples"][:2])
        )
    if report["unknown"]:
        lines.append(f"  NOT UNDERSTOOD ({len(report['unknown'])} records, not imported):")
        lines += [f"    {u['path']}: {u['why']}" for u in report["unknown"]]
    rep = report.get("reproduction")
    if rep is not None:
        verdict = "reproduced exactly" if rep["reproduced"] else "DIFFERS"
        lines.append(
            f"  the run's own results snapshot ({rep['snapshot']}): {verdict} "
            f"({rep['checked']} figures checked, largest difference "
            f"{rep['max_abs_diff']:.3g})"
        )
        lines += [f"    {d}" for d in rep["differences"][:20]]
    return "\n".join(lines)
