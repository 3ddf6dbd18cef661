"""How the notebook API shows things: HTML tables (``_repr_html_``), pandas or Arrow.

Times, sizes and plain-text tables are :mod:`seglake.render` (shared with the CLI and jobs).
"""

from __future__ import annotations

import html
from typing import Any, Literal

import pyarrow as pa

As = Literal["pandas", "arrow"]
_MAX_HTML_ROWS = 50


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
