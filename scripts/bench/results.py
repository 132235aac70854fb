"""The bench's results: one :class:`Row` per table line, and the table itself."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Row:
    """One line of the table: samples, their unit and the target (``None``: informative)."""

    key: str
    label: str
    unit: str
    samples: list[float]
    target: float | None = None
    strict: bool = False  # target is "<" rather than "<="
    note: str = ""
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None

    @property
    def p90(self) -> float | None:
        if not self.samples:
            return None
        ordered = sorted(self.samples)
        return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]

    @property
    def ratio(self) -> float | None:
        if self.target is None or self.median is None:
            return None
        return self.median / self.target

    @property
    def status(self) -> str:
        if self.error is not None:
            return "ERROR"
        if self.target is None or self.median is None:
            return "info"
        ok = self.median < self.target if self.strict else self.median <= self.target
        return "pass" if ok else "MISS"

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "label": self.label,
            "unit": self.unit,
            "n": len(self.samples),
            "median": self.median,
            "p90": self.p90,
            "min": min(self.samples) if self.samples else None,
            "max": max(self.samples) if self.samples else None,
            "target": self.target,
            "target_op": "<" if self.strict else "<=",
            "ratio": self.ratio,
            "status": self.status,
            "note": self.note,
            "error": self.error,
            "samples": self.samples,
            **self.extra,
        }


def _num(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "%":
        return f"{value:.4f}"
    if unit == "MB":
        return f"{value:.2f}"
    return f"{value:.3f}" if value < 100 else f"{value:.1f}"


def render_table(rows: list[Row], header: str) -> str:
    cols = ["benchmark", "n", "median", "p90", "min", "max", "target", "median/target", "result"]
    lines = []
    for row in rows:
        n = len(row.samples)
        spread = n > 1
        target = "-" if row.target is None else f"{'<' if row.strict else '<='} "
        if row.target is not None:
            target += f"{_num(row.target, row.unit)} {row.unit}"
        lines.append(
            [
                row.label,
                str(n),
                f"{_num(row.median, row.unit)} {row.unit}" if row.samples else "-",
                _num(row.p90, row.unit) if spread else "-",
                _num(min(row.samples), row.unit) if spread else "-",
                _num(max(row.samples), row.unit) if spread else "-",
                target,
                "-" if row.ratio is None else f"{row.ratio:.2f}",
                row.status,
            ]
        )
    widths = [max(len(c), *(len(line[i]) for line in lines)) for i, c in enumerate(cols)]

    def fmt(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    out = [header, fmt(cols), fmt(["-" * w for w in widths])]
    out += [fmt(line) for line in lines]
    notes = [f"  {row.label}: {row.note}" for row in rows if row.note]
    errors = [f"  {row.label}: ERROR {row.error}" for row in rows if row.error]
    if notes or errors:
        out += ["", "notes:", *notes, *errors]
    return "\n".join(out)
