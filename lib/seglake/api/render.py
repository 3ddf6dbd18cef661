"""How the notebook API shows things: ISO times, sizes, HTML tables, pandas or Arrow."""

from __future__ import annotations

import html
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from seglake.errors import escaped

As = Literal["pandas", "arrow"]
_MAX_HTML_ROWS = 50


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


def output(t: pa.Table, as_: As) -> Any:
    if as_ == "arrow":
        return t
    if as_ == "pandas":
        return t.to_pandas()
    raise ValueError(f"as_={as_!r}: expected 'pandas' or 'arrow'")


def html_table(headers: list[str], rows: list[list[Any]], *, right: set[int]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for r in rows[:_MAX_HTML_ROWS]:
        cells = "".join(
            f'<td style="text-align:{"right" if i in right else "left"}">{html.escape(str(v))}</td>'
            for i, v in enumerate(r)
        )
        body.append(f"<tr>{cells}</tr>")
    if len(rows) > _MAX_HTML_ROWS:
        body.append(
            f'<tr><td colspan="{len(headers)}">... {len(rows) - _MAX_HTML_ROWS} more</td></tr>'
        )
    return (
        f'<table class="seglake"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>"
    )


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
