"""Values and tables as a person reads them: ISO times, sizes, aligned plain-text tables.

Shared by the notebook API (``api/``), the CLI, the jobs' reports, the demo and
:mod:`seglake.plot`; the notebook's own HTML and pandas/Arrow output is ``api/show.py``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from seglake.errors import escaped


def iso(ms: int | None) -> str:
    """``2026-01-01 00:00:00.000`` (UTC, ms) for any epoch ms >= 0, also past year 9999
    (``10000-01-01 ...``, where ``datetime`` stops); "" for none (< 0)."""
    if ms is None or ms < 0:
        return ""
    return str(np.datetime_as_string(np.datetime64(int(ms), "ms"))).replace("T", " ")


def size_text(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)


def cell_text(v: Any) -> str:
    """A table cell as a person reads it: integers with thousands separators, floats with
    two decimals, ``None`` as "" (a bool stays ``True``/``False``), text :func:`escaped`."""
    if v is None:
        return ""
    if isinstance(v, (bool, np.bool_)):
        return str(bool(v))
    if isinstance(v, (int, np.integer)):
        return f"{int(v):,}"
    if isinstance(v, (float, np.floating)):
        return f"{float(v):,.2f}"
    return escaped(str(v))


def text_table(headers: list[str], rows: list[list[Any]], *, right: set[int] | None = None) -> str:
    """An aligned plain-text table (a header line, a rule, one line per row), cells by
    :func:`cell_text`; columns in ``right`` (default: those whose cells are all numbers)
    are right-aligned. No trailing blanks."""
    cells = [[cell_text(v) for v in r] for r in rows]
    if right is None:
        right = {
            i
            for i in range(len(headers))
            if rows
            and all(
                isinstance(r[i], (int, float, np.integer, np.floating))
                and not isinstance(r[i], (bool, np.bool_))
                for r in rows
                if r[i] is not None
            )
        }
    widths = [max([len(h)] + [len(c[i]) for c in cells]) for i, h in enumerate(headers)]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if i in right else v.ljust(w)
            for i, (v, w) in enumerate(zip(values, widths, strict=True))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, cells)])
